"""A member never reads the stored cursors of a range while it holds newer ones it could not
write, and never releases a range before its last cursors are written (no server: the
member's collaborators are stand-ins; what is checked is the order of writes, reads and
releases).

Found by the short chaos run in ``key_shared`` mode: a member's cursor writes failed for a
while, it rebuilt meanwhile, read the older stored cursors and ran again 28 records it had
already finished (in-process replays), and a dropped range's unwritten cursors were thrown
away before its lease was released, so the next owner replayed them too.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kazoo.exceptions import NoNodeError

from coordinator.cursors import CursorFlush
from coordinator.errors import CoordinatorError, Fenced
from keyshared.core.claims import PartitionClaims
from keyshared.core.slots import SlotRange
from keyshared.modes.handback import HandBack
from keyshared.modes.held_ranges import HeldRanges
from keyshared.modes.key_shared import KeySharedMember

RANGE = SlotRange(0, 99)


class Writer:
    """A cursor writer whose flushes fail until ``fail`` is cleared."""

    def __init__(self, log: list[str], fail: type[Exception] | None) -> None:
        self.log = log
        self.fail = fail
        self.pending = 1
        self.slots = RANGE  # the range it writes: set when held (held_ranges)

    def stage_pieces(self, topic: str, partition: int, pieces: Any, stamp: Any) -> None:
        self.log.append(f"staged {topic}[{partition}]@{pieces[0][1]}")
        self.pending = 1

    def flush(self) -> int:
        if self.fail is not None:
            self.log.append("write failed")
            raise self.fail("/lease", "write")
        self.log.append("written")
        self.pending = 0
        return 1


def flush_each(writers: list[Writer]) -> CursorFlush:
    """The stand-ins' flushes, reported as :func:`coordinator.cursors.flush_together` does."""
    report = CursorFlush()
    for writer in writers:
        try:
            report.written[writer.slots] = writer.flush()
        except Fenced as exc:
            report.fenced[writer.slots] = exc
        except CoordinatorError as exc:
            report.failed[writer.slots] = exc
    return report


def held_ranges(log: list[str], *writers: Writer) -> HeldRanges:
    """Ranges 0-99, 100-199, ... held, each with the next of ``writers``."""
    leases = SimpleNamespace(release=lambda lease: log.append("released"))
    queue = list(writers)
    hand_back = HandBack(_NoDispatcher(), lambda: True)  # type: ignore[arg-type]
    held = HeldRanges(leases, lambda lease: queue.pop(0), lambda: None, hand_back, flush_each)  # type: ignore[arg-type, return-value]
    for i in range(len(writers)):
        slots = SlotRange(100 * i, 100 * i + 99)
        writers[i].slots = slots
        held.holdings.want(str(slots))
        held.add(slots, SimpleNamespace(token=7 + i, key=str(slots)))  # type: ignore[arg-type]
    return held


def member(log: list[str], *writers: Writer) -> KeySharedMember:
    m = KeySharedMember.__new__(KeySharedMember)
    fields: dict[str, Any] = {
        "_closing": False,
        "_gate": SimpleNamespace(
            lost=False,
            suspended=False,
            metrics=SimpleNamespace(owned=lambda *a, **k: None),
        ),
        "_held": held_ranges(log, *writers),
        "_assign_retry_at": None,
        "_regain_at": None,
        "_assigned": [],
        "_claims": {},
        "_events": SimpleNamespace(states={}),
        "_consumer": SimpleNamespace(assign=lambda targets: log.append("assign")),
        "_me": "M",
        "_ctx": SimpleNamespace(topics=[]),
        "_generation": 1,
        "_desired": (),
        "_queue": SimpleNamespace(queue_missing=lambda *args: True),
        "_dispatcher": _NoDispatcher(),
    }
    for name, value in fields.items():
        setattr(m, name, value)

    def read_claims(_consumer: Any, held: list[tuple[SlotRange, int]]) -> dict[Any, Any]:
        log.append("read stored cursors")
        return {}

    m._reader = SimpleNamespace(read=read_claims, stamps={})  # type: ignore[assignment]
    return m


class _NoDispatcher:
    """Nothing runs: every holding is idle."""

    def running(self, _states: object) -> int:
        return 0


def test_stored_cursors_are_not_read_while_newer_ones_are_unwritten() -> None:
    log: list[str] = []
    writer = Writer(log, fail=CoordinatorError)
    m = member(log, writer)
    m._assign_from_cursors()
    assert "read stored cursors" not in log, "read cursors older than its own progress"
    assert m._assign_retry_at is not None, "no retry scheduled"

    writer.fail = None  # ZooKeeper answers again
    log.clear()
    m._assign_from_cursors()
    assert log[:2] == ["written", "read stored cursors"]
    assert m._assign_retry_at is None


def test_a_fenced_range_is_dropped_and_the_rest_is_read() -> None:
    log: list[str] = []
    up_to_date = Writer(log, fail=None)
    up_to_date.pending = 0
    m = member(log, Writer(log, fail=Fenced), up_to_date)
    m._assign_from_cursors()
    assert RANGE not in m._held and SlotRange(100, 199) in m._held
    assert log == ["write failed", "read stored cursors", "assign"]
    assert m._assign_retry_at is None


def test_a_dropped_range_writes_its_last_cursors_before_its_release() -> None:
    log: list[str] = []
    writer = Writer(log, fail=CoordinatorError)
    held = held_ranges(log, writer)
    held.give_up(RANGE, drained=True, committed=False, stragglers=[])
    assert RANGE not in held
    held.hand_back.tick()
    assert "released" not in log, "released before its cursors were written"
    writer.fail = None
    held.hand_back.tick()
    assert log[-2:] == ["written", "released"]
    held.hand_back.tick()
    assert log.count("released") == 1


def test_a_range_dropped_after_a_failed_reread_writes_the_cursors_put_back_first() -> None:
    """A flush fails and puts the range's cursors back; the re-read therefore reads nothing
    and the member runs nothing. ZooKeeper answers again and a new plan drops the range
    before the re-read is retried: the drain commits nothing (nothing runs), yet the
    cursors put back are the range's newest and must reach ZooKeeper before its release, or
    the next owner starts from older ones and runs records again."""
    log: list[str] = []
    writer = Writer(log, fail=CoordinatorError)
    m = member(log, writer)
    m._assign_from_cursors()  # write_pending raises: nothing read, nothing assigned
    assert m._assigned == [] and writer.pending == 1
    writer.fail = None
    m._deferred = SimpleNamespace(defer=lambda states, drop: False, take=lambda: [RANGE])
    m._events = SimpleNamespace(states={})
    m._rebuild(drop=[RANGE])
    assert "released" in log
    assert log.index("written") < log.index("released"), log


def test_a_missing_znode_under_the_last_write_is_retried_not_read_as_the_lease_gone() -> None:
    """Only a fence says the lease is gone. A NoNode from the cursor write itself (a cursor
    directory missing) is a failed write: retried, and the lease released after it, never
    dropped standing."""
    log: list[str] = []
    writer = Writer(log, fail=NoNodeError)
    held = held_ranges(log, writer)
    held.give_up(RANGE, drained=True, committed=False, stragglers=[])
    assert "released" not in log and len(held.hand_back) == 1, "dropped with its lease standing"
    writer.fail = None
    held.hand_back.tick()
    assert log[-2:] == ["written", "released"]


def test_a_range_regained_after_it_was_fenced_stages_its_cursor_afresh() -> None:
    """What a range's last write staged is forgotten with the range (fenced, or given up):
    a member that gains it again under a new lease writes its cursor at the first flush even
    if it is the same, and a member whose ranges change shape under churn does not keep an
    entry per range shape it ever held."""
    log: list[str] = []
    first, regained = Writer(log, None), Writer(log, None)
    held = held_ranges(log, first)
    claims = {("t", 0): PartitionClaims.resolve([(RANGE, 7)], [], base=0)}
    progress = [(("t", 0), 10, [], 10)]
    held.write(progress, claims, force=False, suspended=False)
    assert log == ["staged t[0]@10", "written"]
    held.forget(RANGE)  # fenced
    held._writer_of = lambda lease: regained  # type: ignore[assignment,return-value]
    held.holdings.want(str(RANGE))
    held.add(RANGE, SimpleNamespace(token=9, key=str(RANGE)))  # type: ignore[arg-type]
    log.clear()
    held.write(progress, claims, force=False, suspended=False)
    assert log == ["staged t[0]@10", "written"] and regained.pending == 0
    assert all(slots == RANGE for slots, _ in held._written)
