"""A stop past ``drain_timeout`` keeps what the member holds until its handlers end (issue 24,
defect 4), in ``key_shared`` and ``exclusive`` mode as partition leases already did.

Member A runs a handler that does not return; A is stopped with ``drain_timeout`` 1 s, so its
drain times out and ``run()`` returns while the call still runs. Its range lease (or the
exclusive lock) must stand until that call ends: member B, started afterwards, queues behind it
and runs nothing, and the merged journals show no key run twice at once.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import pytest
from kazoo.recipe.lock import Lock

import keyshared
from coordinator import ZooKeeperCoordinator
from tests.coordinator.conftest import WAIT_S, take
from tests.coordinator.members import StartMember
from tests.coordinator.test_key_shared import Sequencer
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.journal import check, produce

SLOW = b"slow"


def _range_holders(admin: ZooKeeperCoordinator, group: str) -> Callable[[], list[tuple[str, bool]]]:
    leases = admin.range_leases(group, "observer")
    return lambda: [(lease.member_id, lease.held) for lease in leases.read()]


def _lock_holders(admin: ZooKeeperCoordinator, group: str) -> Callable[[], list[tuple[str, bool]]]:
    lock = Lock(admin.client, admin.layout(group).active)

    def read() -> list[tuple[str, bool]]:
        return [(member, index == 0) for index, member in enumerate(lock.contenders())]

    return read


@pytest.mark.parametrize("mode", ["key_shared", "exclusive"])
def test_a_stop_past_the_drain_timeout_keeps_the_holding_until_the_handler_ends(
    mode: str,
    start: StartMember,
    admin: ZooKeeperCoordinator,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
) -> None:
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group(f"handback-{mode}")  # type: ignore[operator]
    seq = Sequencer()
    produce(kafka_bootstrap, topic, seq.records([SLOW, b"k1", b"k2"], 3))
    holders = (_range_holders if mode == "key_shared" else _lock_holders)(admin, group)
    options = {"mode": mode, "drain_timeout": 1.0}
    if mode == "exclusive":
        options["poison"] = "block"

    release = threading.Event()
    holding: queue.Queue[int] = queue.Queue()

    def hold_the_slow_key(record: keyshared.Record) -> None:
        if record.raw_key == SLOW and int(record.value) == 1:
            holding.put(record.offset)
            assert release.wait(WAIT_S * 4), "the test never released the slow record"

    a_journal, b_journal = Recorder(hold_the_slow_key, pid=1), Recorder(pid=2)
    try:
        a = start(group, topic, a_journal, member="A", **options)
        take(holding, "member A to start the slow record")
        a.stop()  # returns past the drain timeout, the slow call still running
        assert ("A", True) in holders(), f"A gave its {mode} holding up while its call ran"

        start(group, topic, b_journal, member="B", **options)
        wait_until(lambda: ("B", False) in holders(), "B to queue behind A", WAIT_S)
        assert ("A", True) in holders()
        assert b_journal.snapshot() == [], "B ran records while A's call still ran"
    finally:
        release.set()

    wait_until(lambda: "A" not in dict(holders()), "A's holding to be released", WAIT_S)
    total = sum(seq.counts.values())
    wait_until(
        lambda: len({(e.key, e.seq) for e in a_journal.snapshot() + b_journal.snapshot()
                     if e.kind == "E"}) >= total,
        "every record to be processed by A or B",
        WAIT_S * 2,
    )  # fmt: skip
    report = check(a_journal.snapshot() + b_journal.snapshot(), seq.counts)
    assert not report.missing and not report.violations, report.summary()
