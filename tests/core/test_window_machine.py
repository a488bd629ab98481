"""Hypothesis state machine for InFlightWindow: random arrival, completion, positions, pausing.

A plain model is kept next to the window; after every step the window's observable state must
agree with the model and the ordering / cursor / capacity invariants must hold. At teardown
everything reachable is completed and every admitted record must have been released exactly
once, with the cursor at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from keyshared.core.runs import OffsetRuns
from keyshared.core.window import Entry, InFlightWindow

KEYS: list[bytes | None] = [None, b"a", b"b", b"c", b""]
WORKERS = 3
ALREADY_DONE_SPAN = 40


@dataclass
class Rec:
    offset: int
    key: bytes | None
    worker: int
    payload: object
    received_at: float
    ordered: bool
    done_on_arrival: bool
    released: int = 0  # how many times the window handed it out
    completed: bool = False


class WindowMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.window: InFlightWindow[object] = InFlightWindow(0)
        self.recs: dict[int, Rec] = {}
        self.order: list[int] = []  # admitted offsets, ascending
        self.in_flight: dict[int, Rec] = {}  # released and not completed, per the model
        self.entries: dict[int, Entry[object]] = {}  # every entry the window handed out
        self.already_done: set[int] = set()
        self.start = 0
        self.end = 0  # one past the highest admitted or observed offset
        self.next_offset = 0
        self.last_cursor = 0
        self.paused = False
        self.clock = 0.0
        self.max_window = 1
        self.low = 0
        self.capacity = 1
        self.null_ordered = False
        self.ceiling: int | None = None  # lowest offset given back (the partition is draining)

    # -- setup ---------------------------------------------------------------------------------

    @initialize(
        start=st.integers(0, 5),
        max_window=st.integers(1, 8),
        low_frac=st.floats(0, 0.99),
        default_low=st.booleans(),
        capacity=st.integers(1, 3),
        null_ordered=st.booleans(),
        done=st.sets(st.integers(0, ALREADY_DONE_SPAN - 1), max_size=15),
    )
    def setup(
        self,
        start: int,
        max_window: int,
        low_frac: float,
        default_low: bool,
        capacity: int,
        null_ordered: bool,
        done: set[int],
    ) -> None:
        low = None if default_low else int(low_frac * max_window)
        self.window = InFlightWindow(
            start,
            max_window=max_window,
            low_watermark=low,
            per_worker_capacity=capacity,
            null_keys_ordered=null_ordered,
            already_done=frozenset(start + d for d in done),
        )
        self.start = self.end = self.next_offset = self.last_cursor = start
        self.already_done = {start + d for d in done}
        self.max_window = max_window
        self.low = max_window * 8 // 10 if low is None else low
        self.capacity = capacity
        self.null_ordered = null_ordered
        assert self.window.low_watermark == self.low

    # -- model helpers -------------------------------------------------------------------------

    def incomplete(self) -> list[Rec]:
        return [r for r in (self.recs[o] for o in self.order) if not r.completed]

    def held(self) -> int:
        """What ``max_window`` bounds: the unfinished records (finished ones hold no state,
        however far the cursor is behind them)."""
        return len(self.incomplete())

    def idle_cursor(self) -> int:
        """The cursor with nothing unfinished: the end of what was read, past any offsets
        finished before the restart that follow it (a commit at one would un-name it), and
        never past a record given back."""
        cursor = self.end
        while cursor in self.already_done:
            cursor += 1
        return cursor if self.ceiling is None else min(cursor, self.ceiling)

    def done_not_read_yet(self, cursor: int) -> list[int]:
        """Offsets finished before the restart that the window has not read: they stay
        finished in every commit until it reads them."""
        seen_end = self.end if self.ceiling is None else min(self.end, self.ceiling)
        return sorted(o for o in self.already_done if o >= max(seen_end, cursor + 1))

    def on_released(self, entries: list[Entry[object]]) -> None:
        for entry in entries:
            rec = self.recs.get(entry.offset)
            assert rec is not None, f"released offset {entry.offset} was never admitted"
            assert not rec.done_on_arrival, f"already-done offset {rec.offset} dispatched"
            assert not rec.completed, f"completed offset {rec.offset} released again"
            assert rec.released == 0, f"offset {rec.offset} released twice"
            assert entry.in_flight and not entry.done
            assert (entry.key, entry.worker, entry.ordered) == (rec.key, rec.worker, rec.ordered)
            assert entry.payload is rec.payload
            assert entry.received_at == rec.received_at
            if rec.ordered:
                # every earlier record of the key has finished before this one starts
                for o in self.order:
                    if o >= rec.offset:
                        break
                    other = self.recs[o]
                    if other.ordered and other.key == rec.key:
                        assert other.completed, (
                            f"offset {rec.offset} of key {rec.key!r} released while earlier "
                            f"offset {o} is not finished"
                        )
            rec.released += 1
            self.in_flight[rec.offset] = rec
            self.entries[rec.offset] = entry

    # -- rules ---------------------------------------------------------------------------------

    @precondition(lambda self: self.ceiling is None)
    @rule(
        key=st.sampled_from(KEYS),
        gap=st.integers(0, 3) | st.just(0),
        worker=st.integers(0, WORKERS - 1),
        dt=st.floats(0, 2),
    )
    def admit(self, key: bytes | None, gap: int, worker: int, dt: float) -> None:
        offset = self.next_offset + gap
        self.clock += dt
        payload = object()
        done = offset in self.already_done
        ordered = key is not None or self.null_ordered
        rec = Rec(offset, key, worker, payload, self.clock, ordered, done, completed=done)
        self.recs[offset] = rec
        self.order.append(offset)
        result = self.window.admit(offset, key, worker, payload, self.clock)
        self.next_offset = offset + 1
        self.end = max(self.end, offset + 1)
        if result is None:
            return
        assert result.offset == offset
        self.on_released([result])

    @precondition(lambda self: self.ceiling is None)
    @rule(gap=st.integers(0, 2))
    def admit_finished(self, gap: int) -> None:
        """A filtered-out record: done on arrival, never dispatched, holds no key."""
        offset = self.next_offset + gap
        rec = Rec(offset, None, -1, None, self.clock, False, True, completed=True)
        self.recs[offset] = rec
        self.order.append(offset)
        self.window.admit_finished(offset)
        self.next_offset = offset + 1
        self.end = max(self.end, offset + 1)
        assert self.window.get(offset) is None

    @precondition(lambda self: self.ceiling is None)
    @rule(back=st.integers(1, 3))
    def admit_out_of_order(self, back: int) -> None:
        offset = self.next_offset - back
        size = self.window.size
        try:
            self.window.admit(offset, b"a", 0, object(), self.clock)
        except ValueError as exc:
            assert "out of order" in str(exc)
        else:
            raise AssertionError(f"admit({offset}) after end {self.next_offset} accepted")
        assert self.window.size == size

    @precondition(lambda self: bool(self.in_flight))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(sorted(self.in_flight)), label="complete")
        rec = self.in_flight.pop(offset)
        rec.completed = True
        # The adapters complete by entry (no lookup); tools and tests may pass the offset.
        by_entry = data.draw(st.booleans(), label="by entry")
        released = self.window.complete(self.entries[offset] if by_entry else offset)
        self.on_released(released)

    @precondition(lambda self: bool(self.in_flight))
    @rule(data=st.data())
    def complete_many(self, data: st.DataObject) -> None:
        """A settlement batch: several in-flight records (any order) in one step, with a
        record settled before mixed in now and then, which is refused and changes nothing."""
        offsets = data.draw(
            st.lists(st.sampled_from(sorted(self.in_flight)), min_size=1, unique=True),
            label="complete many",
        )
        batch = [self.entries[offset] for offset in offsets]
        stale = [e for o, e in self.entries.items() if self.recs[o].completed]
        if stale and data.draw(st.booleans(), label="with a stale one"):
            batch.insert(data.draw(st.integers(0, len(batch)), label="at"), stale[0])
        for offset in offsets:
            self.in_flight.pop(offset).completed = True
        released: list[Entry[object]] = []
        refused: list[Entry[object]] = []
        self.window.complete_many(batch, released, refused)
        assert refused == [e for e in batch if e.offset not in offsets]
        self.on_released(released)

    @rule(offset=st.integers(0, 60))
    def complete_not_in_flight(self, offset: int) -> None:
        """Completing something that is not in flight raises and changes nothing.

        Waiting offsets are left out on purpose: see test_window.py for that case.
        """
        rec = self.recs.get(offset)
        if offset in self.in_flight or (rec is not None and not rec.completed):
            return
        before = (self.window.size, self.window.in_flight, self.window.safe_cursor)
        stale = self.entries.get(offset)
        for attempt in (offset, stale) if stale is not None else (offset,):
            try:
                self.window.complete(attempt)
            except KeyError:
                pass
            else:
                raise AssertionError(f"complete({offset}) of a record not in flight accepted")
        assert (self.window.size, self.window.in_flight, self.window.safe_cursor) == before

    @rule(gap=st.integers(0, 2), later=st.integers(0, 2))
    def give_back(self, gap: int, later: int) -> None:
        """Records delivered while draining are handed back: the cursor never passes the
        first of them, whatever completes or whatever the consumer's position says."""
        offset = self.next_offset + gap
        self.window.give_back(offset)
        self.window.give_back(offset + later)  # a later give-back never raises the ceiling
        ceiling = offset
        while ceiling in self.already_done:  # finished before: the next owner needs none
            ceiling += 1
        self.ceiling = ceiling if self.ceiling is None else min(self.ceiling, ceiling)
        # Given-back records were delivered but never taken in: the window's end stays.
        self.next_offset = max(self.next_offset, offset + later + 1)

    @rule(ahead=st.integers(-2, 4))
    def observe_position(self, ahead: int) -> None:
        position = self.end + ahead
        self.window.observe_position(position)
        if position > self.end:
            self.end = position
            self.next_offset = max(self.next_offset, position)

    @rule()
    def check_pause(self) -> None:
        size = self.held()
        expect = not self.paused and size >= self.max_window
        assert self.window.should_pause() is expect
        if expect:
            self.paused = True
        assert self.window.paused is self.paused

    @rule()
    def check_resume(self) -> None:
        size = self.held()
        expect = self.paused and size <= self.low
        assert self.window.should_resume() is expect
        if expect:
            self.paused = False
        assert self.window.paused is self.paused

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def counts_agree(self) -> None:
        w = self.window
        incomplete = self.incomplete()
        assert w.in_flight == len(self.in_flight)
        assert w.in_flight + w.waiting == w.size == len(incomplete)
        for rec in incomplete:
            entry = w.get(rec.offset)
            assert entry is not None and entry.offset == rec.offset
            assert entry.in_flight is (rec.offset in self.in_flight)
        busy = {r.key for r in incomplete if r.ordered}
        assert w.busy_keys == len(busy)

    @invariant()
    def one_in_flight_per_ordered_key(self) -> None:
        keys = [r.key for r in self.in_flight.values() if r.ordered]
        assert len(keys) == len(set(keys)), f"two records of one key in flight: {keys}"

    @invariant()
    def worker_capacity(self) -> None:
        for worker in range(WORKERS):
            load = sum(1 for r in self.in_flight.values() if r.worker == worker)
            assert load <= self.capacity
            assert self.window.worker_load(worker) == load

    @invariant()
    def nothing_waits_without_a_reason(self) -> None:
        """A waiting record waits for an earlier record of its key or for a full worker."""
        incomplete = self.incomplete()
        loads = {w: 0 for w in range(WORKERS)}
        for r in self.in_flight.values():
            loads[r.worker] += 1
        seen_keys: set[bytes | None] = set()
        for rec in incomplete:
            behind_key = rec.ordered and rec.key in seen_keys
            if rec.ordered:
                seen_keys.add(rec.key)
            if rec.offset in self.in_flight or behind_key:
                continue
            assert loads[rec.worker] == self.capacity, (
                f"offset {rec.offset} waits although key {rec.key!r} is free and worker "
                f"{rec.worker} has {loads[rec.worker]}/{self.capacity} in flight"
            )

    @invariant()
    def safe_cursor(self) -> None:
        cursor = self.window.safe_cursor
        assert cursor >= self.last_cursor, "cursor went backwards"
        assert cursor >= self.start
        self.last_cursor = cursor
        incomplete = self.incomplete()
        if self.ceiling is not None:
            assert cursor <= self.ceiling, f"cursor {cursor} passed given-back {self.ceiling}"
        if not incomplete:
            assert cursor == self.idle_cursor()
            return
        lowest = incomplete[0].offset
        assert cursor <= lowest, f"cursor {cursor} passed incomplete offset {lowest}"
        # Between the cursor and the lowest incomplete offset there is no received record, so
        # committing the cursor resumes exactly at the lowest incomplete record.
        received_between = [o for o in self.order if cursor <= o < lowest]
        assert not received_between, (cursor, lowest, received_between)

    @invariant()
    def finished_above_cursor(self) -> None:
        cursor = self.window.safe_cursor
        expect = [o for o in self.order if o >= cursor and self.recs[o].completed]
        if self.ceiling is not None:
            expect = [o for o in expect if o < self.ceiling]
        expect = sorted({*expect, *self.done_not_read_yet(cursor)})
        finished = self.window.finished_above_cursor()
        assert list(finished) == expect
        assert finished.runs == OffsetRuns.from_offsets(expect).runs  # merged, normal form

    @invariant()
    def memory_follows_what_is_unfinished(self) -> None:
        """Finished records are dropped from the window's queue in amortised O(1)."""
        assert self.window.held <= 2 * self.window.size + 65

    @invariant()
    def blocker(self) -> None:
        now = self.clock + 1.0
        got = self.window.blocker(now)
        incomplete = self.incomplete()
        if not incomplete:
            assert got is None
            return
        oldest = incomplete[0]
        assert got is not None
        assert (got.offset, got.key, got.in_flight) == (
            oldest.offset,
            oldest.key,
            oldest.offset in self.in_flight,
        )
        assert got.age == pytest.approx(now - oldest.received_at)

    # -- the end: drain everything ---------------------------------------------------------------

    def teardown(self) -> None:
        steps = 0
        while self.in_flight:
            offset = min(self.in_flight)
            self.in_flight.pop(offset).completed = True
            self.on_released(self.window.complete(offset))
            steps += 1
            assert steps <= len(self.recs), "drain does not terminate"
        w = self.window
        assert (w.size, w.in_flight, w.waiting, w.busy_keys) == (0, 0, 0, 0)
        for rec in self.recs.values():
            if rec.done_on_arrival:
                assert rec.released == 0
            else:
                assert rec.released == 1, f"offset {rec.offset} released {rec.released} times"
                assert rec.completed
        assert w.safe_cursor == self.idle_cursor()
        assert list(w.finished_above_cursor()) == self.done_not_read_yet(w.safe_cursor)
        assert w.blocker(self.clock) is None
        assert all(w.worker_load(i) == 0 for i in range(WORKERS))


WindowMachine.TestCase.settings = settings(
    max_examples=400,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestWindowMachine = WindowMachine.TestCase
