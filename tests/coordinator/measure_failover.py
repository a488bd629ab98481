"""Failover time of ``exclusive`` mode after ``kill -9`` of the active member, run by hand.

Not a test (no timed assertion belongs in the suite): it measures, over N runs, the time from
the SIGKILL of the active member to the first handler start of the standby that takes over,
from the handlers' own journals (CLOCK_MONOTONIC, one clock for every process), and prints
p50 and max next to the ZooKeeper session timeout. Needs a running cluster::

    eval "$(keyshared dev env)"          # after keyshared dev up
    python -m tests.coordinator.measure_failover --runs 10 --session-timeout 4

Each run uses a fresh topic (3 partitions) and group, two members (one active, one standby),
records flowing all along, and kills the active member once it has processed 200 records.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from kazoo.recipe.lock import Lock

from coordinator import ZooKeeperCoordinator
from tests.kafka.support.journal import (
    count_finished,
    delete_group,
    kill_all,
    produce,
    read_journal,
    sequenced,
    start_consumer,
    wait_for,
)


def one_run(bootstrap: str, zookeeper: str, session_timeout: float, tmp: Path) -> float:
    """Seconds from the kill of the active member to the standby's first handler start."""
    name = f"failover-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 3, 1)])[name].result(30)
    journal = tmp / f"{name}.journal"
    procs = {}
    try:
        with ZooKeeperCoordinator(zookeeper) as zk:
            active_dir = zk.layout(name).active
            for member in ("first", "second"):
                procs[member] = start_consumer(
                    bootstrap, name, name, journal, workers=3, sleep_ms="8,12",
                    args=["--mode", "exclusive", "--poison", "block", "--zookeeper", zookeeper,
                          "--session-timeout", str(session_timeout), "-X", f"client.id={member}"],
                    log=tmp / f"{name}-{member}.log",
                )  # fmt: skip

            def contenders() -> list[str]:
                return [str(c) for c in Lock(zk.client, active_dir).contenders()]

            wait_for(lambda: len(contenders()) == 2, 60, "two contenders")
            active = contenders()[0]
            keys: list[bytes | None] = [f"k{i}".encode() for i in range(60)]
            produce(bootstrap, name, sequenced(keys, 100))
            wait_for(lambda: count_finished(journal) >= 200, 60, "the active member to work")
            victim = procs.pop(active)
            killed_at = time.monotonic_ns()
            victim.kill()
            victim.wait(10)
            wait_for(
                lambda: any(e.t > killed_at for e in read_journal(journal)),
                6 * session_timeout,
                "the standby to take over",
            )
        takeover = min(e.t for e in read_journal(journal) if e.t > killed_at)
        return (takeover - killed_at) / 1e9
    finally:
        kill_all(procs.values())
        admin.delete_topics([name])
        delete_group(bootstrap, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--session-timeout", type=float, default=4.0)
    parser.add_argument(
        "--bootstrap-servers", default=os.environ.get("KEYSHARED_BOOTSTRAP_SERVERS")
    )
    parser.add_argument("--zookeeper", default=os.environ.get("KEYSHARED_ZOOKEEPER"))
    args = parser.parse_args()
    if not args.bootstrap_servers or not args.zookeeper:
        parser.error("needs --bootstrap-servers and --zookeeper (or eval $(keyshared dev env))")
    times = []
    with tempfile.TemporaryDirectory(prefix="keyshared-failover-") as tmp:
        for run in range(1, args.runs + 1):
            seconds = one_run(
                args.bootstrap_servers, args.zookeeper, args.session_timeout, Path(tmp)
            )
            times.append(seconds)
            print(f"run {run:2d}: failover {seconds:.2f} s", flush=True)
    print(
        f"session timeout {args.session_timeout:g} s, {len(times)} runs: "
        f"p50 {statistics.median(times):.2f} s, max {max(times):.2f} s, min {min(times):.2f} s"
    )


if __name__ == "__main__":
    main()
