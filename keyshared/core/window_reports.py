"""What the in-flight window reports to its owner: the safe cursor, counts and fill level.

A part of :class:`~keyshared.core.window.InFlightWindow` (a base class of it), kept apart
because the window has two audiences. The dispatcher moves records through it (admit, complete,
give back: :mod:`keyshared.core.window`, the per-record path); everyone else only reads it, per
poll batch, per commit or once a second: the commits (:attr:`~WindowReports.safe_cursor`,
:meth:`~WindowReports.finished_above_cursor`), backpressure (:meth:`~WindowReports.should_pause`,
:meth:`~WindowReports.should_resume`), the gauges, stuck-record warnings and the health view
(counts, :meth:`~WindowReports.blocker`). A base class rather than an object the window holds,
so the per-record path keeps reaching its fields directly.

The fields are the window's (its constructor sets them); nothing here changes them except the
pause latch. Pure, like the window: no I/O, no threads, no clocks (``now`` is passed in).
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

from keyshared.core.entry import CursorBlocker, Entry
from keyshared.core.runs import EMPTY_RUNS, OffsetRuns

__all__ = ["WindowReports"]

P = TypeVar("P")


class WindowReports(Generic[P]):
    """The reads of :class:`~keyshared.core.window.InFlightWindow` (see the module)."""

    max_window: int
    low_watermark: int
    _cursor: int
    _end: int
    _ceiling: int | None
    _done_before_runs: OffsetRuns
    _pending: deque[Entry[P]]
    _unfinished: int
    _gaps: list[tuple[int, int]]
    _key_tails: dict[bytes | None, Entry[P]]
    _worker_load: dict[int, int]
    _in_flight: int
    _paused: bool

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
