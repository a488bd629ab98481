"""A member cut off from Kafka but not from ZooKeeper must not hold its work for ever.

Its ZooKeeper session lives on, so nothing in ZooKeeper expires by itself: in ``key_shared``
mode its range leases, with partition leases its partition leases, would stand while it reads
nothing, and the keys behind them would wait for as long as the partition lasts. After a
bound the member gives them up (the same drain and hand-over as any move), the group's other
member takes the keys on, and when Kafka answers again the member comes back.

Each test breaks member A's link to the broker (``cut``: connections reset, new ones refused;
``blackhole``: packets vanish, only timeouts notice) while member B keeps both servers,
produces meanwhile, and measures the bound: from the break to B's first start of a key A had
been running. The journal of both members' handler starts and ends proves nothing lost and no
key run twice at once.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from coordinator import ZooKeeperCoordinator
from coordinator.incarnations import TopicRecords
from keyshared.dev.topics import unique_name
from tests.coordinator.conftest import NAMESPACE
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.journal import check, produce
from tests.partitions.conftest import Partitioned, StartMember

pytestmark = pytest.mark.integration

KEYS = [f"key-{i}".encode() for i in range(40)]
BOUND_S = 30.0  # what the tests accept: session.timeout.ms (6 s) plus drains, with margin

KEY_SHARED = {"mode": "key_shared"}
PARTITION_LEASES = {"mode": "partition", "kafka": {"partition.assignment.strategy": "range"}}
CASES = {
    "key_shared-cut": (KEY_SHARED, "cut"),
    "key_shared-blackhole": (KEY_SHARED, "blackhole"),
    "partition_leases-cut": (PARTITION_LEASES, "cut"),
}


def _round(servers: Partitioned, topic: str, seq: int) -> None:
    produce(servers.bootstrap, topic, [(key, seq) for key in KEYS])


def _await_round(recorders: list[Recorder], seq: int) -> None:
    wait_until(
        lambda: len(_finished(recorders, seq)) == len(KEYS), f"round {seq} finished", timeout=60
    )


def _finished(recorders: list[Recorder], seq: int) -> set[bytes]:
    return {
        e.key
        for r in recorders
        for e in r.snapshot()
        if e.kind == "E" and e.seq == seq and e.key is not None
    }


def _until_both_hold_work(
    servers: Partitioned, topic: str, a: Recorder, b: Recorder
) -> tuple[int, set[bytes]]:
    """Rounds until both members ran some key: the last round, and the keys A ran in it."""
    seq = 0
    while not (seq and _finished([a], seq) and _finished([b], seq)):
        seq += 1
        _round(servers, topic, seq)
        _await_round([a, b], seq)
    return seq, _finished([a], seq)


def _moved_after(
    servers: Partitioned,
    topic: str,
    a: Recorder,
    b: Recorder,
    seq: int,
    a_keys: set[bytes],
    broke_at: int,
) -> float:
    """Round ``seq``, produced after the break: seconds from the break (monotonic ns) to B's
    first start of a key A had been running."""
    _round(servers, topic, seq)
    _await_round([a, b], seq)
    taken_over = min(
        e.t for e in b.snapshot() if e.kind == "S" and e.seq == seq and e.key in a_keys
    )
    return (taken_over - broke_at) / 1e9


def _heal_and_check(servers: Partitioned, topic: str, a: Recorder, b: Recorder, seq: int) -> None:
    """Heal the link, run round ``seq`` on both, and judge every round: none lost, no key run
    twice at once."""
    servers.kafka_link.heal()
    _round(servers, topic, seq)
    _await_round([a, b], seq)
    report = check(a.snapshot() + b.snapshot(), dict.fromkeys(KEYS, seq))
    assert not report.missing and not report.violations, report.summary()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_member_cut_off_from_kafka_gives_its_work_up_within_a_bound(
    servers: Partitioned,
    topic: object,  # before start: members stop before their topic is deleted
    start: StartMember,
    case: str,
) -> None:
    options, fault = CASES[case]
    name = topic(2)  # type: ignore[operator]
    group = unique_name("kafka-cut")
    a, b = Recorder(pid=1), Recorder(pid=2)
    start(group, name, a, "a", bootstrap=servers.kafka_link.address, **options)
    start(group, name, b, "b", **options)
    seq, a_keys = _until_both_hold_work(servers, name, a, b)

    cut = time.monotonic_ns()
    getattr(servers.kafka_link, fault)()
    bound = _moved_after(servers, name, a, b, seq + 1, a_keys, cut)
    print(f"\n{case}: A's keys moved to B {bound:.1f} s after the {fault}")
    assert bound < BOUND_S
    _heal_and_check(servers, name, a, b, seq + 2)


def test_a_leader_cut_off_in_the_middle_of_its_low_watermark_pass_still_gives_its_work_up(
    servers: Partitioned,
    topic: object,
    start: StartMember,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The leader's low-watermark pass reads the group's offsets from Kafka, then commits.
    A link that goes silent between the two used to leave the commit waiting for its socket
    timeout (a minute) on the poll thread: no tick, so no withdrawal, and the member's keys
    waited as long (the CI run of stop 30). Here the blackhole falls exactly there."""
    armed = threading.Event()
    fired = threading.Event()
    original_commit = TopicRecords.commit

    def commit(self: TopicRecords, *args: Any, **kwargs: Any) -> bool:
        # Naming the commit in the topic's record comes after the pass read Kafka's offsets
        # and before it commits; only the leader, A, makes passes.
        named = original_commit(self, *args, **kwargs)
        if armed.is_set() and not fired.is_set():
            fired.set()
            servers.kafka_link.blackhole()
        return named

    monkeypatch.setattr(TopicRecords, "commit", commit)

    name = topic(2)  # type: ignore[operator]
    group = unique_name("kafka-cut-pass")
    a, b = Recorder(pid=1), Recorder(pid=2)
    start(group, name, a, "a", bootstrap=servers.kafka_link.address, **KEY_SHARED)
    with ZooKeeperCoordinator(servers.zookeeper, namespace=NAMESPACE).start() as admin:
        wait_until(lambda: admin.status(group).leader == "a", "A to lead", 30)
    start(group, name, b, "b", **KEY_SHARED)
    seq, a_keys = _until_both_hold_work(servers, name, a, b)

    armed.set()  # A's next pass (every few seconds) meets the blackhole
    assert fired.wait(30), "A's low-watermark pass never ran"
    bound = _moved_after(servers, name, a, b, seq + 1, a_keys, time.monotonic_ns())
    print(f"\nA's keys moved to B {bound:.1f} s after the blackhole in its pass")
    assert bound < BOUND_S
    _heal_and_check(servers, name, a, b, seq + 2)


@pytest.mark.parametrize("fault", ["cut", "blackhole"])
def test_an_active_exclusive_member_cut_off_from_kafka_hands_the_role_to_a_standby(
    servers: Partitioned,
    topic: object,
    start: StartMember,
    fault: str,
) -> None:
    """``exclusive``: the active member's lock would stand while it reads nothing, and the
    standby would wait for as long as the cut lasts (the whole group stalled). After the bound
    the active member gives the role up; the standby takes over from the committed offsets."""
    name = topic(2)  # type: ignore[operator]
    group = unique_name("kafka-cut-exclusive")
    a, b = Recorder(pid=1), Recorder(pid=2)
    start(group, name, a, "a", bootstrap=servers.kafka_link.address, mode="exclusive")
    _round(servers, name, 1)
    _await_round([a], 1)  # A is the active member
    start(group, name, b, "b", mode="exclusive")
    with ZooKeeperCoordinator(servers.zookeeper, namespace=NAMESPACE).start() as admin:
        contenders = admin.layout(group).active
        wait_until(lambda: len(admin.client.get_children(contenders)) == 2, "B to queue", 30)

    cut = time.monotonic_ns()
    getattr(servers.kafka_link, fault)()
    _round(servers, name, 2)
    _await_round([a, b], 2)
    taken_over = min(e.t for e in b.snapshot() if e.kind == "S" and e.seq == 2)
    bound = (taken_over - cut) / 1e9
    print(f"\nexclusive: B became active and ran round 2 {bound:.1f} s after the {fault}")
    assert bound < BOUND_S
    _heal_and_check(servers, name, a, b, 3)
