"""A Kafka share-group consumer (KIP-932, GA in Kafka 4.2) as the sweep's unordered reference.

Share groups are what Kafka itself now offers for "more consumers than partitions": the broker
hands records out to any member, with no per-key (or per-partition) order. The sweep times
confluent-kafka's ``ShareConsumer`` as a user with a sync handler would run it: ``members``
share consumers (one each on its own thread: the client is not thread-safe) feeding one thread
pool of ``concurrency`` threads. A member hands a polled batch to the pool, waits for it, and
polls again, which accepts the batch (``share.acknowledgement.mode=implicit``, the default):
a record is acknowledged only once handled, the share-group counterpart of a safe commit.

Why the group's ``share.auto.offset.reset`` is set to ``earliest`` first: a share group starts
at the *latest* offset by default (a group config, not a client one), and the sweep's records
are produced before the group exists.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from confluent_kafka import admin as kafka_admin
from confluent_kafka.admin import AdminClient

from keyshared.bench.contenders import BenchError, Tally
from keyshared.bench.result import Measurement

__all__ = ["MEMBERS", "run_share_consumer", "start_at_earliest"]

# A member may hold only one polled batch at a time (the next poll accepts it), so its pool
# idles while a batch's last records run: eight members, as many as partitions, keep it fed.
MEMBERS = 8


def start_at_earliest(admin: AdminClient, group: str, timeout: float = 30.0) -> None:
    """Make share group ``group`` start at the earliest offset (before any member joins)."""
    # The admin types come through the module: its stubs do not re-export them.
    resource = kafka_admin.ConfigResource(  # type: ignore[attr-defined]
        kafka_admin.ResourceType.GROUP,  # type: ignore[attr-defined]
        group,
        incremental_configs=[
            kafka_admin.ConfigEntry(  # type: ignore[attr-defined]
                "share.auto.offset.reset",
                "earliest",
                incremental_operation=kafka_admin.AlterConfigOpType.SET,  # type: ignore[attr-defined]
            )
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout)


def run_share_consumer(
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    handler_s: float,
    concurrency: int,
    *,
    members: int = MEMBERS,
    timeout: float = 600.0,
) -> Measurement:
    """Time ``members`` share consumers of ``group`` over ``records`` records of ``topic``,
    handling them in a pool of ``concurrency`` threads (inline when ``handler_s`` is 0)."""
    from confluent_kafka import ShareConsumer

    start_at_earliest(AdminClient({"bootstrap.servers": bootstrap}), group)
    tally = Tally(records)
    errors: list[BaseException] = []
    pool = ThreadPoolExecutor(concurrency, thread_name_prefix="bench-share") if handler_s else None

    def handle(message: Any) -> None:
        tally.start()
        message.value()
        if handler_s:
            time.sleep(handler_s)
        tally.finish()

    def member(index: int) -> None:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            consumer.subscribe([topic])
            while not tally.done.is_set():
                batch = [m for m in consumer.poll(0.2) if m.error() is None]
                if pool is None:
                    for message in batch:
                        handle(message)
                elif batch:
                    wait([pool.submit(handle, message) for message in batch])
        except BaseException as exc:
            errors.append(exc)
            tally.done.set()
        finally:
            consumer.close()

    threads = [
        threading.Thread(target=member, args=(i,), name=f"bench-share-{i}", daemon=True)
        for i in range(members)
    ]
    for thread in threads:
        thread.start()
    label = f"share consumer ({members} members, {concurrency} threads, unordered)"
    try:
        tally.wait(label, timeout)
    finally:
        tally.done.set()
        for thread in threads:
            thread.join(60)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    if errors:
        raise BenchError(f"{label} failed: {errors[0]}") from errors[0]
    return tally.measurement(label, members=members, concurrency=concurrency)
