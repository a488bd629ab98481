"""The in-flight window of one partition: per-key dispatch order and the safe commit cursor.

Kafka orders a partition; keyshared only needs order per key. The window is where that trade is
made safely. It admits records in offset order, lets at most one record per key be in flight,
parks later records of a busy key in that key's own FIFO, and computes the *safe cursor*: the
offset Kafka may be told to resume from without skipping an unfinished record.

It is deliberately single-threaded and I/O-free: the Kafka adapter owns it under a lock, feeds it
records and completions, and acts on what it returns (records to dispatch, pause/resume hints).

Offsets may have gaps (transaction markers, compaction), so the window tracks the offsets it
actually received and never assumes ``offset + 1`` exists.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

__all__ = ["CursorBlocker", "Entry", "InFlightWindow", "WindowDrain"]

P = TypeVar("P")


@dataclass(slots=True, eq=False)
class Entry(Generic[P]):
    """One received record's bookkeeping. ``payload`` is opaque to the window."""

    offset: int
    key: bytes | None
    worker: int
    payload: P
    received_at: float
    ordered: bool
    in_flight: bool = False
    done: bool = False
    attempt: int = field(default=1)
    first_failure: float | None = None  # wall-clock time of the first failed attempt


class CursorBlocker(NamedTuple):
    """The oldest incomplete record: what keeps the committed offset from moving."""

    offset: int
    key: bytes | None
    age: float
    in_flight: bool


class WindowDrain(NamedTuple, Generic[P]):
    """What a removed partition still held, so the adapter can wait for or discard it."""

    in_flight: list[Entry[P]]
    waiting: list[Entry[P]]


class InFlightWindow(Generic[P]):
    """Tracks every received, unfinished record of one partition.

    Example::

        w = InFlightWindow[str](start_offset=0)
        first = w.admit(0, b"k", worker=0, payload="a", now=0.0)   # dispatch it
        assert w.admit(1, b"k", worker=0, payload="b", now=0.0) is None  # waits behind 0
        released = w.complete(0)   # -> [entry for offset 1]
        w.safe_cursor              # -> 1

    :param start_offset: where consumption (re)starts; the cursor never goes below it.
    :param max_window: bound on the records held (in flight, waiting, and finished but not yet
        passed by the cursor); at it the owner should pause.
    :param low_watermark: resume when the window has drained to this size (hysteresis, so a
        partition does not flap between paused and fetching on every record).
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
        already_done: frozenset[int] = frozenset(),
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
        self._already_done = set(already_done)
        self._cursor = start_offset
        self._end = start_offset  # one past the highest offset received (or observed)
        self._pending: deque[Entry[P]] = deque()  # received, not yet passed by the cursor
        self._by_offset: dict[int, Entry[P]] = {}  # incomplete entries
        # busy keys -> their waiting records; None while nothing waits (most keys, most of the
        # time), so the common case allocates no queue
        self._key_queues: dict[bytes | None, deque[Entry[P]] | None] = {}
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
        was already finished before a restart.
        """
        if offset < self._end:
            raise ValueError(
                f"offset {offset} admitted out of order: the window has already seen "
                f"offsets up to {self._end - 1}"
            )
        self._end = offset + 1
        if offset in self._already_done:
            self._already_done.discard(offset)
            self._admit_done(offset)
            return None
        ordered = key is not None or self.null_keys_ordered
        entry: Entry[P] = Entry(offset, key, worker, payload, now, ordered)
        self._pending.append(entry)
        self._by_offset[offset] = entry
        if len(self._pending) == 1:
            self._cursor = offset  # nothing below it is pending: the cursor may jump a gap
        if ordered:
            queues = self._key_queues
            if key in queues:
                queue = queues[key]
                if queue is None:
                    queues[key] = deque((entry,))
                else:
                    queue.append(entry)
                return None
            queues[key] = None
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
        if offset < self._end:
            raise ValueError(
                f"offset {offset} admitted out of order: the window has already seen "
                f"offsets up to {self._end - 1}"
            )
        self._end = offset + 1
        self._already_done.discard(offset)
        self._admit_done(offset)

    def _admit_done(self, offset: int) -> None:
        # Finished on arrival: an offset is all the cursor needs, never the payload.
        entry: Entry[P] = Entry(offset, None, -1, None, 0.0, False)  # type: ignore[arg-type]
        entry.done = True
        self._pending.append(entry)
        self._advance()

    def give_back(self, offset: int) -> None:
        """A delivered record is handed back unprocessed (its partition is draining).

        From then on the cursor never passes ``offset``, whatever the consumer's position
        says: the next owner must get this record and everything after it again. Without
        this, a shutdown that fetched records it did not process committed past them.
        """
        if self._ceiling is None or offset < self._ceiling:
            self._ceiling = offset

    def complete(self, offset: int) -> list[Entry[P]]:
        """Mark an in-flight record finished; return the records that may now be dispatched.

        Finished covers every terminal outcome: success, dropped, dead-lettered (after the DLQ
        write was acknowledged), filtered out. Completing an unknown offset raises, because it
        means the adapter's bookkeeping is wrong and a silent ignore could hide a lost record.
        """
        entry = self._by_offset.get(offset)
        if entry is None or not entry.in_flight:
            raise KeyError(f"offset {offset} is not in flight in this window")
        del self._by_offset[offset]
        entry.in_flight = False
        entry.done = True
        self._in_flight -= 1
        released: list[Entry[P]] = []
        self._worker_load[entry.worker] -= 1
        if self._backlogged:
            backlog = self._worker_backlog.get(entry.worker)
            if backlog:
                self._backlogged -= 1
                released.append(self._start(backlog.popleft()))
        if entry.ordered:
            queue = self._key_queues[entry.key]
            if queue:
                nxt = self._try_start(queue.popleft())
                if nxt is not None:
                    released.append(nxt)
            else:
                del self._key_queues[entry.key]
        pending = self._pending
        if pending[0] is entry:
            self._advance()
        return released

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
        while pending and pending[0].done:
            pending.popleft()
        cursor = pending[0].offset if pending else max(self._cursor, self._end)
        ceiling = self._ceiling
        self._cursor = cursor if ceiling is None or cursor < ceiling else ceiling

    def observe_position(self, position: int) -> None:
        """Let the cursor pass offsets the consumer skipped without delivering them.

        The consumer's position moves past transaction markers and compacted-away offsets that
        never reach the application. Without this the cursor would stop one short of the end
        of a transactional partition forever.
        """
        if position > self._end:
            self._end = position
            self._advance()

    # -- state for the owner -----------------------------------------------------------------

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

    def finished_above_cursor(self) -> list[int]:
        """Offsets already finished above the cursor, for the commit metadata."""
        return [e.offset for e in self._pending if e.done]

    @property
    def size(self) -> int:
        """Incomplete records held: in flight plus waiting."""
        return len(self._by_offset)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return len(self._by_offset) - self._in_flight

    @property
    def busy_keys(self) -> int:
        """Ordered keys with a record in flight (or held back by a full worker)."""
        return len(self._key_queues)

    def worker_load(self, worker: int) -> int:
        return self._worker_load.get(worker, 0)

    @property
    def held(self) -> int:
        """Records the window holds: incomplete ones plus finished ones above the cursor.

        This is what ``max_window`` bounds. Counting only incomplete records let one stuck
        record pin the cursor while finished records (and the commit metadata listing them)
        piled up behind it without limit.
        """
        return len(self._pending)

    def should_pause(self) -> bool:
        """True once when the window fills up; the owner pauses fetching this partition."""
        if not self._paused and len(self._pending) >= self.max_window:
            self._paused = True
            return True
        return False

    def should_resume(self) -> bool:
        """True once when a paused window has drained to the low watermark."""
        if self._paused and len(self._pending) <= self.low_watermark:
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
        """The incomplete entry at ``offset``, if any."""
        return self._by_offset.get(offset)

    def remove(self) -> WindowDrain[P]:
        """Hand back everything incomplete (the partition is being revoked).

        The window is unusable afterwards; in-flight records are the adapter's to wait for,
        waiting records were never started and are simply dropped (they will be redelivered
        to the next owner from the committed cursor).
        """
        in_flight = [e for e in self._by_offset.values() if e.in_flight]
        waiting = [e for e in self._by_offset.values() if not e.in_flight]
        in_flight.sort(key=lambda e: e.offset)
        waiting.sort(key=lambda e: e.offset)
        self._by_offset.clear()
        self._key_queues.clear()
        self._worker_backlog.clear()
        self._backlogged = 0
        self._worker_load.clear()
        self._in_flight = 0
        return WindowDrain(in_flight, waiting)
