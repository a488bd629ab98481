"""The in-flight window of one partition: per-key dispatch order and the safe commit cursor.

Kafka orders a partition; keyshared only needs order per key. The window is where that trade is
made safely. It admits records in offset order, lets at most one record per key be in flight,
parks later records of a busy key in that key's own FIFO, and computes the *safe cursor*: the
offset Kafka may be told to resume from without skipping an unfinished record.

Completions may come one by one (:meth:`InFlightWindow.complete`) or as a settlement batch
(:meth:`InFlightWindow.complete_many`); a batch is, by definition and by test, the same as its
entries completed one at a time in its order: same window afterwards, same records released in
the same order. So every ordering and cursor invariant holds for batches as it does per record.

It is deliberately single-threaded and I/O-free: the Kafka adapter owns it under a lock, feeds it
records and completions, and acts on what it returns (records to dispatch, pause/resume hints).
What the owner reads of it (the safe cursor, counts, fill level, the blocker) is the last part
of the class.

Offsets may have gaps (transaction markers, compaction), so the window tracks the offsets it
actually received and never assumes ``offset + 1`` exists.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Generic, TypeVar

from keyshared.core.entry import CursorBlocker, Entry, WindowDrain
from keyshared.core.runs import EMPTY_RUNS, OffsetRuns, RunCursor

__all__ = ["CursorBlocker", "Entry", "InFlightWindow", "WindowDrain"]

P = TypeVar("P")


class InFlightWindow(Generic[P]):
    """Tracks every received, unfinished record of one partition.

    Example::

        w = InFlightWindow[str](start_offset=0)
        first = w.admit(0, b"k", worker=0, payload="a", now=0.0)   # dispatch it
        assert w.admit(1, b"k", worker=0, payload="b", now=0.0) is None  # waits behind 0
        released = w.complete(first)   # -> [entry for offset 1]
        w.safe_cursor              # -> 1

    It stores an entry per *unfinished* record only; the finished offsets above the cursor are
    computed as runs from the unfinished ones and the gaps (:meth:`finished_above_cursor`), so
    a stuck record holds back its key and the committed offset, never the partition.

    :param start_offset: where consumption (re)starts; the cursor never goes below it.
    :param max_window: bound on the unfinished records held (in flight or waiting); at it the
        owner should pause fetching. Finished records do not count: they hold no state.
    :param low_watermark: resume when the unfinished records have dropped to this many
        (hysteresis, so a partition does not flap between paused and fetching on every record,
        and librdkafka does not throw away and fetch again its prefetched batch each time).
    :param per_worker_capacity: at most this many in-flight records per worker; more wait.
    :param null_keys_ordered: treat all null-key records as one ordered key instead of as
        independent records.
    :param already_done: offsets finished before a restart (from the commit metadata); they are
        counted as complete on arrival instead of being processed again.
    """

    def __init__(
        self,
        start_offset: int,
        *,
        max_window: int = 10_000,
        low_watermark: int | None = None,
        per_worker_capacity: int = 1_000,
        null_keys_ordered: bool = False,
        already_done: Iterable[int] = EMPTY_RUNS,
    ) -> None:
        if max_window < 1:
            raise ValueError(f"max_window must be >= 1, got {max_window}")
        if per_worker_capacity < 1:
            raise ValueError(f"per_worker_capacity must be >= 1, got {per_worker_capacity}")
        low = max_window * 8 // 10 if low_watermark is None else low_watermark
        if not 0 <= low < max_window:
            raise ValueError(f"low_watermark must be in [0, max_window), got {low}")
        self.max_window = max_window
        self.low_watermark = low
        self.per_worker_capacity = per_worker_capacity
        self.null_keys_ordered = null_keys_ordered
        self._done_before_runs = OffsetRuns.coerce(already_done)
        self._done_before = RunCursor(self._done_before_runs)
        self.done_on_arrival = 0  # records admitted already finished (metrics: skipped)
        # A commit names the offsets above its cursor, never the cursor itself: the cursor
        # never rests on an offset finished before the restart (its outputs may be committed).
        self._cursor = self._done_before_runs.run_end(start_offset)
        self._end = start_offset  # one past the highest offset received (or observed)
        # Unfinished entries in offset order. A finished entry is dropped lazily: at once when
        # it is the oldest, else when finished ones outnumber unfinished ones (_compact).
        self._pending: deque[Entry[P]] = deque()
        self._unfinished = 0
        self._finished_inside = 0  # finished entries still inside _pending (not at its head)
        # Offsets above the oldest unfinished record that were never delivered (transaction
        # markers, compacted away): not finished by anyone, so never claimed in the metadata.
        self._gaps: list[tuple[int, int]] = []
        # busy key -> the last of its records received (the chain's tail, see Entry.next)
        self._key_tails: dict[bytes | None, Entry[P]] = {}
        self._worker_load: dict[int, int] = {}
        self._worker_backlog: dict[int, deque[Entry[P]]] = {}
        self._backlogged = 0  # records waiting only for worker capacity
        self._in_flight = 0
        self._paused = False
        self._ceiling: int | None = None  # lowest offset given back: the cursor stops there

    # -- admission and completion ------------------------------------------------------------

    def admit(
        self, offset: int, key: bytes | None, worker: int, payload: P, now: float
    ) -> Entry[P] | None:
        """Take a newly received record; return its entry if it may be dispatched now.

        Returns None when the record waits (its key is busy or its worker is full) or when it
        was already finished before a restart (:attr:`done_on_arrival` counts those).
        """
        end = self._end
        if offset != end:
            self._note_gap(offset)
        self._end = offset + 1
        if offset >= self._done_before.lo and self._done_before.take(offset):
            self.done_on_arrival += 1
            self._admit_done()
            return None
        if not self._unfinished:
            self._cursor = offset  # nothing below it is unfinished: the cursor may jump a gap
        self._unfinished += 1
        if key is not None or self.null_keys_ordered:
            tails = self._key_tails
            tail = tails.get(key)
            if tail is not None:
                # Waits behind its key, sharing the key's bytes with it: one copy per busy
                # key instead of one per waiting record (40 bytes each).
                entry: Entry[P] = Entry(offset, tail.key, worker, payload, now, True)
                self._pending.append(entry)
                tails[key] = tail.next = entry
                return None
            entry = Entry(offset, key, worker, payload, now, True)
            tails[key] = entry
        else:
            entry = Entry(offset, key, worker, payload, now, False)
        self._pending.append(entry)
        # _try_start, inlined: this is the path of nearly every record
        load = self._worker_load.get(worker, 0)
        if load >= self.per_worker_capacity:
            self._worker_backlog.setdefault(worker, deque()).append(entry)
            self._backlogged += 1
            return None
        entry.in_flight = True
        self._in_flight += 1
        self._worker_load[worker] = load + 1
        return entry

    def admit_finished(self, offset: int) -> None:
        """Take a received record that needs no processing (filtered out): done on arrival."""
        if offset != self._end:
            self._note_gap(offset)
        self._end = offset + 1
        if offset >= self._done_before.lo:
            self._done_before.take(offset)
        self._admit_done()

    def _note_gap(self, offset: int) -> None:
        end = self._end
        if offset < end:
            raise ValueError(
                f"offset {offset} admitted out of order: the window has already seen "
                f"offsets up to {end - 1}"
            )
        if self._unfinished:
            self._gaps.append((end, offset))

    def _admit_done(self) -> None:
        # Finished on arrival: it needs no entry. With nothing unfinished below it the cursor
        # moves past it now; otherwise its offset is simply not among the unfinished ones.
        if not self._unfinished:
            self._advance()

    def give_back(self, offset: int) -> None:
        """A delivered record is handed back unprocessed (its partition is draining).

        From then on the cursor never passes ``offset``, whatever the consumer's position
        says: the next owner must get this record and everything after it again. Without
        this, a shutdown that fetched records it did not process committed past them. Records
        finished before the restart need nothing from the next owner: the ceiling passes a run
        of them that starts at ``offset`` (a commit at one would un-name it).
        """
        offset = self._done_before_runs.run_end(offset)
        if self._ceiling is None or offset < self._ceiling:
            self._ceiling = offset
            if self._cursor > offset:
                self._cursor = offset

    def complete(self, entry: Entry[P] | int) -> list[Entry[P]]:
        """Mark an in-flight record finished; return the records that may now be dispatched.

        Finished covers every terminal outcome: success, dropped, dead-lettered (after the DLQ
        write was acknowledged), filtered out. Completing a record that is not in flight raises,
        because it means the adapter's bookkeeping is wrong and a silent ignore could hide a
        lost record. Pass the entry :meth:`admit` returned (an offset also works, by a search:
        for tests and tools, not for the per-record path).
        """
        if isinstance(entry, int):
            found = self.get(entry)
            if found is None:
                raise KeyError(f"offset {entry} is not in flight in this window")
            entry = found
        released: list[Entry[P]] = []
        self.complete_many((entry,), released)
        return released

    def complete_many(
        self,
        entries: Iterable[Entry[P]],
        released: list[Entry[P]],
        refused: list[Entry[P]] | None = None,
    ) -> None:
        """Complete several in-flight records in one step, as :meth:`complete` one by one would.

        The records each completion releases are appended to ``released``, in the order the
        completions in turn would have returned them, so the resulting window (and what starts)
        is the same as completing them one at a time. A record that is not in flight raises
        ``KeyError`` (the ones before it stay completed); with ``refused`` given it is
        appended there instead and the rest go on: a settlement of many records must not
        leave the others' keys busy because one of them was settled twice.
        """
        worker_load = self._worker_load
        key_tails = self._key_tails
        for entry in entries:
            if not entry.in_flight:
                if refused is None:
                    raise KeyError(f"offset {entry.offset} is not in flight in this window")
                refused.append(entry)
                continue
            entry.in_flight = False
            entry.done = True
            self._in_flight -= 1
            self._unfinished -= 1
            worker = entry.worker
            worker_load[worker] -= 1
            if self._backlogged:
                backlog = self._worker_backlog.get(worker)
                if backlog:
                    self._backlogged -= 1
                    released.append(self._start(backlog.popleft()))
            if entry.ordered:
                nxt = entry.next
                if nxt is None:
                    del key_tails[entry.key]
                else:
                    entry.next = None
                    started = self._try_start(nxt)
                    if started is not None:
                        released.append(started)
            pending = self._pending
            if pending and pending[0] is entry:
                pending.popleft()
                self._advance()
            else:
                self._finished_inside += 1
                if self._finished_inside > 64 and self._finished_inside > self._unfinished:
                    self._compact()

    def _compact(self) -> None:
        """Drop the finished entries inside the queue: amortised O(1) per record, and the
        queue never holds more than twice the unfinished records (plus a small constant)."""
        self._pending = deque(entry for entry in self._pending if not entry.done)
        self._finished_inside = 0

    def _try_start(self, entry: Entry[P]) -> Entry[P] | None:
        load = self._worker_load.get(entry.worker, 0)
        if load >= self.per_worker_capacity:
            self._worker_backlog.setdefault(entry.worker, deque()).append(entry)
            self._backlogged += 1
            return None
        entry.in_flight = True
        self._in_flight += 1
        self._worker_load[entry.worker] = load + 1
        return entry

    def _start(self, entry: Entry[P]) -> Entry[P]:
        entry.in_flight = True
        self._in_flight += 1
        self._worker_load[entry.worker] = self._worker_load.get(entry.worker, 0) + 1
        return entry

    def _advance(self) -> None:
        pending = self._pending
        while pending and pending[0].done:  # each was counted in _finished_inside
            pending.popleft()
            self._finished_inside -= 1
        if pending:
            cursor = pending[0].offset
            gaps = self._gaps
            if gaps and gaps[0][1] <= cursor:
                self._gaps = [gap for gap in gaps if gap[1] > cursor]
        else:
            # Everything read is finished: the cursor goes to the end of what was read, and
            # past the run finished before the restart that starts there, if one does (the
            # cursor names its offset unfinished, and the metadata only offsets above it).
            cursor = self._done_before_runs.run_end(max(self._cursor, self._end))
            self._gaps = []
            self._finished_inside = 0
        ceiling = self._ceiling
        self._cursor = cursor if ceiling is None or cursor < ceiling else ceiling

    def observe_position(self, position: int) -> None:
        """Let the cursor pass offsets the consumer skipped without delivering them.

        The consumer's position moves past transaction markers and compacted-away offsets that
        never reach the application. Without this the cursor would stop one short of the end
        of a transactional partition forever.
        """
        if position > self._end:
            if self._unfinished:
                self._gaps.append((self._end, position))
            self._end = position
            self._advance()

    # -- revocation --------------------------------------------------------------------------

    def remove(self) -> WindowDrain[P]:
        """Hand back everything incomplete (the partition is being revoked).

        The window is unusable afterwards; in-flight records are the adapter's to wait for,
        waiting records were never started and are simply dropped (they will be redelivered
        to the next owner from the committed cursor).
        """
        unfinished = [e for e in self._pending if not e.done]
        in_flight = [e for e in unfinished if e.in_flight]
        waiting = [e for e in unfinished if not e.in_flight]
        for entry in unfinished:
            entry.next = None
        self._pending.clear()
        self._unfinished = 0
        self._finished_inside = 0
        self._gaps = []
        self._key_tails.clear()
        self._worker_backlog.clear()
        self._backlogged = 0
        self._worker_load.clear()
        self._in_flight = 0
        return WindowDrain(in_flight, waiting)

    # -- What the owner reads: per poll batch, per commit or once a second -------------------
    # The commits (safe_cursor, finished_above_cursor), backpressure (should_pause,
    # should_resume), the gauges, stuck-record warnings and the health view (counts, blocker).
    # Nothing here changes the window except the pause latch.

    @property
    def safe_cursor(self) -> int:
        """The offset to commit: never past an incomplete record, never backwards."""
        return self._cursor

    @property
    def seen_end(self) -> int:
        """One past the highest offset this window has taken in (received, or passed by the
        consumer's position), capped at the first record handed back: every offset below it
        is either finished, incomplete, or never delivered, and this window knows which."""
        ceiling = self._ceiling
        return self._end if ceiling is None or ceiling > self._end else ceiling

    def finished_above_cursor(self) -> OffsetRuns:
        """Offsets already finished above the cursor, as runs, for the commit metadata.

        Computed, not stored: every offset between the cursor and :attr:`seen_end` that is
        neither unfinished nor a gap (never delivered). O(unfinished records + gaps).
        """
        cursor = self._cursor
        end = self.seen_end
        # Offsets finished before a restart that this window has not read yet stay finished:
        # a member that stops before reading that far must not drop them from its commit, or
        # the next start redoes everything behind a stuck record that was killed twice.
        carried = self._done_before_runs
        ahead = carried.from_floor(max(end, cursor + 1)) if carried else EMPTY_RUNS
        if end <= cursor + 1 or not self._unfinished:
            return ahead
        holes = [(e.offset, e.offset + 1) for e in self._pending if not e.done]
        if self._gaps:
            holes = sorted(holes + self._gaps)
        return OffsetRuns.between(cursor + 1, end, holes) | ahead

    @property
    def size(self) -> int:
        """Incomplete records held: in flight plus waiting."""
        return self._unfinished

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return self._unfinished - self._in_flight

    @property
    def busy_keys(self) -> int:
        """Ordered keys with a record in flight (or held back by a full worker)."""
        return len(self._key_tails)

    def worker_load(self, worker: int) -> int:
        return self._worker_load.get(worker, 0)

    @property
    def held(self) -> int:
        """Entries the window holds in memory: the unfinished ones, plus finished ones not yet
        dropped from inside its queue (never more than the unfinished ones plus 64)."""
        return len(self._pending)

    def should_pause(self) -> bool:
        """True once when the window fills up; the owner pauses fetching this partition."""
        if not self._paused and self._unfinished >= self.max_window:
            self._paused = True
            return True
        return False

    def should_resume(self) -> bool:
        """True once when a paused window has drained to the low watermark."""
        if self._paused and self._unfinished <= self.low_watermark:
            self._paused = False
            return True
        return False

    @property
    def paused(self) -> bool:
        return self._paused

    def blocker(self, now: float) -> CursorBlocker | None:
        """The oldest incomplete record, or None when everything received is finished."""
        for entry in self._pending:
            if not entry.done:
                return CursorBlocker(
                    entry.offset, entry.key, now - entry.received_at, entry.in_flight
                )
        return None

    def get(self, offset: int) -> Entry[P] | None:
        """The incomplete entry at ``offset``, if any (a search: for tests and tools)."""
        for entry in self._pending:
            if entry.offset == offset:
                return None if entry.done else entry
            if entry.offset > offset:
                break
        return None
