"""ZooKeeper's cursor write capacity: how many fenced cursor transactions (one range's commit
each) the server takes when ranges write back to back, each its own session.

Apart from the group runs because it is the ceiling they are read against, with no members,
leader or churn in the way: only :class:`coordinator.cursors.CursorWriter` under a lease.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

from keyshared.bench.scale.zookeeper_stats import delta, mntr, server_cpu_s
from keyshared.core.slots import SlotRange

__all__ = ["WriteCapacity", "measure_write_capacity"]


@dataclass
class WriteCapacity:
    partitions: int
    writers: int
    seconds: float
    transactions_per_s: float  # fenced cursor transactions, one per range and interval
    cursor_writes_per_s: float
    server_cpu_ms_per_transaction: float  # private server only
    server_cpu: float  # cores
    harness_cpu: float  # cores


def measure_write_capacity(
    hosts: str, partitions: int = 64, writers: int = 32, seconds: float = 10.0
) -> WriteCapacity:
    """How many fenced cursor transactions (``partitions`` cursors each, as one range's
    commit) ZooKeeper takes when ``writers`` ranges write back to back, each its own session."""
    from kazoo.client import KazooClient

    from coordinator.cursors import CursorWriter
    from coordinator.layout import GroupLayout
    from coordinator.leases import RangeLeases
    from keyshared.core.slots import split_evenly

    layout = GroupLayout(f"scale-writes-{int(time.time())}", "/keyshared-scale")
    clients = [KazooClient(hosts=hosts, timeout=30.0) for _ in range(writers)]
    for client in clients:
        client.start(timeout=30)
    layout.ensure(clients[0])
    cursor_writes = [0] * writers
    stop = threading.Event()

    def write(index: int, slots: SlotRange) -> None:
        client = clients[index]
        lease = RangeLeases(client, layout, f"writer-{index}").acquire(slots, generation=1)
        writer = CursorWriter(client, layout, lease)
        offset = 0
        while not stop.is_set():
            offset += 100
            for partition in range(partitions):
                writer.stage("scale", partition, offset)
            cursor_writes[index] += writer.flush()

    threads = [
        threading.Thread(target=write, args=(i, slots), daemon=True)
        for i, slots in enumerate(split_evenly(writers))
    ]
    try:
        for thread in threads:
            thread.start()
        time.sleep(1.0)  # leases taken, cursor znodes created
        before, cpu0, harness0 = mntr(hosts), server_cpu_s(hosts), time.process_time()
        began = time.monotonic()
        time.sleep(seconds)
        after, elapsed = mntr(hosts), time.monotonic() - began
        server_cpu = server_cpu_s(hosts) - cpu0
        harness_cpu = time.process_time() - harness0
        stop.set()
        for thread in threads:
            thread.join(30)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            clients[0].delete(layout.root, recursive=True)
        for client in clients:
            with contextlib.suppress(Exception):
                client.stop()
                client.close()
    transactions = delta(after, before, "zxid")
    return WriteCapacity(
        partitions=partitions,
        writers=writers,
        seconds=round(elapsed, 1),
        transactions_per_s=round(transactions / elapsed, 1),
        cursor_writes_per_s=round(transactions * partitions / elapsed, 1),
        server_cpu_ms_per_transaction=round(1000 * server_cpu / max(1.0, transactions), 3),
        server_cpu=round(server_cpu / elapsed, 3),
        harness_cpu=round(harness_cpu / elapsed, 3),
    )
