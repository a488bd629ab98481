"""A member cut off from ZooKeeper but not from Kafka stops starting handlers, and nobody
overlaps it.

Member A reaches ZooKeeper through a :class:`FaultyLink`, member B directly; both reach Kafka.
Records of 40 keys are produced all along. The link is broken (``cut``: connections reset, so
kazoo sees the loss at once; ``blackhole``: packets vanish, so only kazoo's own timeouts and
the member's session probe notice), and healed once ZooKeeper has expired A's session (an
ephemeral znode of A's session is gone). The merged journal of both members' handler starts
and ends must show no start in A later than one session timeout after the break, nothing lost,
and no key run twice at once.

In ``key_shared`` mode B takes A's ranges over once A's session expired (the leader plans
without A) and A rejoins after the heal. With partition leases the Kafka group still assigns
A its partitions, so they wait, unprocessed, until A is back in ZooKeeper (docs/guarantees.md).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from kazoo.client import KazooClient

from keyshared.dev.topics import unique_name
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.journal import check, produce
from tests.partitions.conftest import Partitioned, StartMember

pytestmark = pytest.mark.integration

KEYS = [f"key-{i}".encode() for i in range(40)]
SESSION_S = 4.0
CASES = {
    "key_shared-blackhole": ({"mode": "key_shared"}, "blackhole"),
    "partition_leases-cut": (
        {"mode": "partition", "kafka": {"partition.assignment.strategy": "range"}},
        "cut",
    ),
}


class Rounds:
    """Produces one record per key every ``every`` seconds, on a thread, until stopped."""

    def __init__(self, bootstrap: str, topic: str, every: float = 0.3) -> None:
        self.produced = 0
        self._args = (bootstrap, topic)
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            produce(*self._args, [(key, self.produced + 1) for key in KEYS])
            self.produced += 1

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.produced


def _ended(recorders: list[Recorder], seq: int) -> int:
    return len({e.key for r in recorders for e in r.snapshot() if e.kind == "E" and e.seq == seq})


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_member_cut_off_from_zookeeper_stops_starting_handlers_and_nobody_overlaps_it(
    servers: Partitioned,
    topic: object,  # before start: members stop before their topic is deleted
    start: StartMember,
    observer: KazooClient,
    case: str,
) -> None:
    options, fault = CASES[case]
    name = topic(2)  # type: ignore[operator]
    group = unique_name("zk-cut")
    a = Recorder(lambda _r: time.sleep(0.01), pid=1)
    b = Recorder(lambda _r: time.sleep(0.01), pid=2)
    member_a = start(
        group, name, a, "a", zookeeper=servers.zookeeper_link.address,
        session_timeout=SESSION_S, **options,
    )  # fmt: skip
    start(group, name, b, "b", session_timeout=SESSION_S, **options)
    witness = f"/keyshared-tests/witness-{group}"  # an ephemeral znode of A's session
    member_a.zk.client.create(witness, ephemeral=True)  # type: ignore[attr-defined]

    rounds = Rounds(servers.bootstrap, name)
    try:
        wait_until(lambda: _ended([a], 3) and _ended([b], 3), "both members running keys")
        broken = time.monotonic_ns()
        getattr(servers.zookeeper_link, fault)()
        wait_until(lambda: observer.exists(witness) is None, "A's session expired", timeout=30)
        expired = time.monotonic_ns()
        servers.zookeeper_link.heal()
    finally:
        produced = rounds.stop()
    wait_until(lambda: _ended([a, b], produced) == len(KEYS), "every round finished", 90)

    late = [e for e in a.snapshot() if e.kind == "S" and e.t > broken + SESSION_S * 1e9]
    late = [e for e in late if e.t < expired]  # after the heal A may come back
    starts = [e.t for e in a.snapshot() if e.kind == "S" and broken < e.t < expired]
    last = (max(starts) - broken) / 1e9 if starts else 0.0
    print(f"\n{case}: A's last handler start {last:.2f} s after the {fault}")
    assert not late, f"A started {len(late)} handler(s) past its session timeout: {late[:3]}"
    # After its session expired A is a new member, which redoes what it had not committed:
    # its journal from then on counts as another process (overlaps with anyone still fail).
    events = [replace(e, pid=11) if e.t > expired else e for e in a.snapshot()] + b.snapshot()
    report = check(events, dict.fromkeys(KEYS, produced))
    assert not report.missing and not report.violations, report.summary()
    # Redone only: what A finished shortly before the break or while cut off (uncommitted).
    at_risk = {(e.key, e.seq) for e in a.snapshot() if e.kind == "E" and e.t > broken - 1e9}
    assert set(report.duplicate_ids) <= at_risk, report.duplicate_ids
