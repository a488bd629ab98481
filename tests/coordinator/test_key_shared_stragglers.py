"""``key_shared`` mode: a member whose drain outlives ``drain_timeout`` never runs a key twice.

A change of plan makes a member drain, write its cursors and read again from them. Records
still running when the drain times out are not finished in any cursor, so reading again at once
would hand them to the member's new windows while the first call still runs: two calls of one
key at once, in one process. The member reads again only once they have finished (their results
then reach the cursors, so nothing is redone either), and a range it gave up keeps its lease
until then.

The same holds after a lost session (issue 24, defect 5): a handler that outlives the fence goes
on, and when the member takes its range back, only that handler's key waits for it; every
other key runs at once.
"""

from __future__ import annotations

import queue
import threading

import pytest

import keyshared
from coordinator import ZooKeeperCoordinator
from coordinator.layout import parse_range
from keyshared.core.slots import SlotRange
from tests.coordinator.conftest import WAIT_S, expire_session, take
from tests.coordinator.members import StartMember, keys_in
from tests.coordinator.test_key_shared import Sequencer
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.journal import check, produce

LOW, HIGH = SlotRange(0, 32767), SlotRange(32768, 65535)


def test_a_drain_that_times_out_never_makes_the_member_run_the_straggling_key_twice(
    start: StartMember,
    admin: ZooKeeperCoordinator,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("ks-straggler")  # type: ignore[operator]
    slow = keys_in(LOW, 1, "slow")[0]
    others = keys_in(LOW, 4, "low") + keys_in(HIGH, 4, "high")
    seq = Sequencer()
    produce(kafka_bootstrap, topic, seq.records([slow, *others], 3))

    release = threading.Event()
    holding: queue.Queue[int] = queue.Queue()

    def hold_the_slow_key(record: keyshared.Record) -> None:
        if record.raw_key == slow and int(record.value) == 1:
            holding.put(record.offset)
            assert release.wait(WAIT_S * 4), "the test never released the slow record"

    a_journal, b_journal = Recorder(hold_the_slow_key, pid=1), Recorder(pid=2)
    start(group, topic, a_journal, member="A", drain_timeout=0.5)
    take(holding, "member A to start the slow key's first record")

    # B takes the upper half: A's range 0-65535 becomes 0-32767, a new lease A gets at once
    # (its own older lease never blocks it); A drains, and the drain times out on the slow key.
    caplog.set_level("INFO", logger="keyshared.modes.key_shared")
    admin.pins(group).set(HIGH, "B")
    start(group, topic, b_journal, member="B")
    leases = admin.range_leases(group, "observer")

    def a_holds_the_lower_half() -> bool:
        return any(
            lease.member_id == "A" and lease.held and parse_range(lease.key) == LOW
            for lease in leases.read()
        )

    wait_until(a_holds_the_lower_half, "A to be granted the lower half", WAIT_S)
    waiting = "reads its ranges again once they finish"
    wait_until(
        lambda: waiting in caplog.text or not holding.empty(),
        "A to wait for the slow record, or to start it a second time",
        WAIT_S,
    )
    assert holding.empty(), "A started the slow record again while its first call still ran"
    assert b_journal.snapshot() == [], "B ran the upper half before A's straggler finished"
    release.set()

    total = sum(seq.counts.values())
    wait_until(
        lambda: a_journal.finished() + b_journal.finished() >= total,
        "every record to be processed by A or B",
        WAIT_S * 4,
    )
    report = check(a_journal.snapshot() + b_journal.snapshot(), seq.counts)
    assert not report.missing and not report.violations, report.summary()
    assert report.duplicates == 0, (
        f"the straggler's result was lost and redone: {report.duplicate_ids[:5]}"
    )


def test_after_a_lost_session_only_the_key_of_a_call_still_running_waits_for_it(
    start: StartMember,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
    zookeeper_hosts: str,
) -> None:
    """A's session expires while a handler of the slow key runs, past ``drain_timeout``. A
    takes its range back: the re-read must not start the slow record (or its key's next one)
    beside the call still running, and every other key must run meanwhile. Before the fix the
    re-read started the slow record a second time beside the first call."""
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("ks-fenced-straggler")  # type: ignore[operator]
    slow = keys_in(LOW, 1, "slow")[0]
    others = keys_in(LOW, 4, "low") + keys_in(HIGH, 4, "high")
    seq = Sequencer()
    produce(kafka_bootstrap, topic, seq.records([slow, *others], 3))

    release = threading.Event()
    holding: queue.Queue[int] = queue.Queue()

    def hold_the_slow_key(record: keyshared.Record) -> None:
        if record.raw_key == slow and int(record.value) == 1:
            holding.put(record.offset)
            assert release.wait(WAIT_S * 4), "the test never released the slow record"

    journal = Recorder(hold_the_slow_key, pid=1)
    a = start(group, topic, journal, member="A", drain_timeout=0.5)
    try:
        take(holding, "member A to start the slow key's first record")

        expire_session(a.zk.client, zookeeper_hosts)  # type: ignore[attr-defined]
        produce(kafka_bootstrap, topic, seq.records(others, 2))
        wanted = {(key, n) for key in others for n in range(1, seq.counts[key] + 1)}
        wait_until(
            lambda: (
                wanted <= {(e.key, e.seq) for e in journal.snapshot() if e.kind == "E"}
                or not holding.empty()
            ),
            "A to run every other key after its session came back (or the slow record again)",
            WAIT_S * 2,
        )
        assert holding.empty(), "A started the slow record again while its fenced call still ran"
        slow_starts = [e for e in journal.snapshot() if e.key == slow and e.kind == "S"]
        assert [e.seq for e in slow_starts] == [1], "the slow key went on beside its fenced call"
    finally:
        release.set()  # also on a failure: the held calls would stall the teardown

    total = sum(seq.counts.values())
    wait_until(lambda: journal.finished() >= total, "every record to be processed", WAIT_S * 3)
    running = 0
    for event in sorted((e for e in journal.snapshot() if e.key == slow), key=lambda e: e.t):
        running += 1 if event.kind == "S" else -1
        assert running <= 1, f"two calls of the slow key at once: {event}"
    report = check(journal.snapshot(), seq.counts)
    assert not report.missing, report.summary()
