"""A set of offsets kept as sorted runs: what "finished above the cursor" looks like in memory.

Why runs: behind one stuck record, a partition keeps finishing everything else, so the finished
offsets above the cursor are a few long runs broken only by the records still running or
waiting. Kept as one Python int per offset (a set, a list) they cost tens of bytes each and a
sort per commit; kept as runs they cost two ints per gap, however many records finished. The
commit-metadata codec (:mod:`keyshared.core.offsets`) writes the same runs.

:class:`OffsetRuns` is an immutable :class:`collections.abc.Set`, so it compares equal to a
``set``/``frozenset`` of the same offsets and works wherever code asked ``offset in finished``.
Membership is a binary search over the runs; iterating expands every offset (for tests and
small sets, never on a hot path).

Example::

    >>> runs = OffsetRuns.from_offsets([5, 6, 7, 10])
    >>> runs.runs
    ((5, 8), (10, 11))
    >>> 6 in runs, 8 in runs, len(runs)
    (True, False, 4)
    >>> (runs | OffsetRuns.from_runs([(8, 10)])).runs
    ((5, 11),)
    >>> runs.from_floor(7).runs
    ((7, 8), (10, 11))
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Set
from typing import Any

__all__ = ["EMPTY_RUNS", "OffsetRuns", "RunCursor"]

Run = tuple[int, int]  # [start, end): half-open, start < end


class OffsetRuns(Set[int]):
    """Sorted, disjoint, non-adjacent half-open runs ``[start, end)`` of offsets."""

    __slots__ = ("_count", "_ends", "_starts")

    def __init__(self, starts: list[int], ends: list[int]) -> None:
        """Use :meth:`from_runs` or :meth:`from_offsets`; this trusts its input is normal."""
        self._starts = starts
        self._ends = ends
        self._count = sum(end - start for start, end in zip(starts, ends, strict=True))

    @classmethod
    def from_runs(cls, runs: Iterable[Run]) -> OffsetRuns:
        """Runs in any order, overlapping or touching ones merged; empty runs ignored."""
        return cls._merged(sorted(runs), overlap_ok=True)

    @classmethod
    def from_sorted_runs(cls, runs: Iterable[Run]) -> OffsetRuns:
        """Runs already sorted and disjoint (adjacent ones are still merged): no sort."""
        return cls._merged(runs, overlap_ok=False)

    @classmethod
    def _merged(cls, runs: Iterable[Run], overlap_ok: bool) -> OffsetRuns:
        starts: list[int] = []
        ends: list[int] = []
        for start, end in runs:
            if end <= start:
                continue
            if ends and start <= ends[-1]:
                if start < ends[-1] and not overlap_ok:
                    raise ValueError(f"run {start}-{end} overlaps the one before it")
                ends[-1] = max(ends[-1], end)
            else:
                starts.append(start)
                ends.append(end)
        return cls(starts, ends)

    @classmethod
    def from_offsets(cls, offsets: Iterable[int]) -> OffsetRuns:
        """Offsets in any order, duplicates fine."""
        starts: list[int] = []
        ends: list[int] = []
        for offset in sorted(set(offsets)):
            if ends and offset == ends[-1]:
                ends[-1] = offset + 1
            else:
                starts.append(offset)
                ends.append(offset + 1)
        return cls(starts, ends)

    @classmethod
    def between(cls, lo: int, hi: int, holes: Iterable[Run]) -> OffsetRuns:
        """``[lo, hi)`` minus ``holes`` (sorted by start; they may overlap or stick out)."""
        runs: list[Run] = []
        at = lo
        for start, stop in holes:
            if start >= hi:
                break
            if start > at:
                runs.append((at, start))
            if stop > at:
                at = stop
        if at < hi:
            runs.append((at, hi))
        return cls.from_sorted_runs(runs)

    @classmethod
    def _from_iterable(cls, offsets: Iterable[Any]) -> OffsetRuns:  # type: ignore[override]
        # What the Set mixins (``&``, ``-``, ``^``) build their results with.
        return cls.from_offsets(offsets)

    @classmethod
    def coerce(cls, offsets: Iterable[int]) -> OffsetRuns:
        """``offsets`` itself when it already is runs, else its runs."""
        return offsets if isinstance(offsets, OffsetRuns) else cls.from_offsets(offsets)

    # -- Set -------------------------------------------------------------------------------------

    def __contains__(self, offset: object) -> bool:
        if not isinstance(offset, int):
            return False
        index = bisect_right(self._starts, offset) - 1
        return index >= 0 and offset < self._ends[index]

    def __iter__(self) -> Iterator[int]:
        for start, end in zip(self._starts, self._ends, strict=True):
            yield from range(start, end)

    def __len__(self) -> int:
        return self._count

    def __hash__(self) -> int:
        return hash(self.runs)

    def __repr__(self) -> str:
        shown = ", ".join(f"{s}-{e - 1}" if e - s > 1 else str(s) for s, e in self.runs[:8])
        more = f", ... {len(self._starts) - 8} more runs" if len(self._starts) > 8 else ""
        return f"OffsetRuns({shown}{more})"

    def __or__(self, other: Any) -> OffsetRuns:
        if not isinstance(other, Iterable):
            return NotImplemented
        other_runs = OffsetRuns.coerce(other)
        if not other_runs:
            return self
        if not self:
            return other_runs
        return OffsetRuns.from_runs([*self.runs, *other_runs.runs])

    __ror__ = __or__

    def __and__(self, other: Any) -> OffsetRuns:
        # Run by run: the Set mixin would expand every offset of both sides.
        if not isinstance(other, Iterable):
            return NotImplemented
        other_runs = OffsetRuns.coerce(other)
        starts: list[int] = []
        ends: list[int] = []
        a_starts, a_ends = self._starts, self._ends
        b_starts, b_ends = other_runs._starts, other_runs._ends
        i = j = 0
        while i < len(a_starts) and j < len(b_starts):
            start = max(a_starts[i], b_starts[j])
            end = min(a_ends[i], b_ends[j])
            if start < end:
                starts.append(start)
                ends.append(end)
            if a_ends[i] < b_ends[j]:
                i += 1
            else:
                j += 1
        return OffsetRuns(starts, ends)

    __rand__ = __and__

    # -- runs ------------------------------------------------------------------------------------

    @property
    def runs(self) -> tuple[Run, ...]:
        return tuple(zip(self._starts, self._ends, strict=True))

    @property
    def run_count(self) -> int:
        return len(self._starts)

    @property
    def first(self) -> int | None:
        return self._starts[0] if self._starts else None

    @property
    def last(self) -> int | None:
        """The highest offset in the set."""
        return self._ends[-1] - 1 if self._ends else None

    def from_floor(self, floor: int) -> OffsetRuns:
        """The offsets ``>= floor``."""
        if not self._starts or floor <= self._starts[0]:
            return self
        index = bisect_right(self._starts, floor) - 1
        starts = self._starts[index:]
        ends = self._ends[index:]
        if index >= 0 and floor >= ends[0]:
            starts, ends = starts[1:], ends[1:]
        elif index >= 0:
            starts = [floor, *starts[1:]]
        return OffsetRuns(list(starts), list(ends))

    def run_end(self, offset: int) -> int:
        """One past the run holding ``offset`` (``offset`` itself when it is not in the set)."""
        index = bisect_right(self._starts, offset) - 1
        if index >= 0 and offset < self._ends[index]:
            return self._ends[index]
        return offset


EMPTY_RUNS = OffsetRuns([], [])


class RunCursor:
    """Membership tests for offsets asked in increasing order, in O(1) each.

    The window asks "was this offset finished before the restart?" for every record it admits,
    in offset order; a binary search per record would cost more than the rest of admission.
    """

    __slots__ = ("_ends", "_index", "_starts", "lo")

    def __init__(self, runs: OffsetRuns) -> None:
        self._starts = [start for start, _ in runs.runs]
        self._ends = [end for _, end in runs.runs]
        self._index = 0
        self.lo = self._starts[0] if self._starts else _NEVER
        """No offset below ``lo`` is in the set: the caller's one-comparison fast path."""

    def take(self, offset: int) -> bool:
        """Whether ``offset`` is in the set; offsets must not decrease between calls."""
        index = self._index
        ends = self._ends
        while index < len(ends) and ends[index] <= offset:
            index += 1
        self._index = index
        if index == len(ends):
            self.lo = _NEVER
            return False
        self.lo = self._starts[index]
        return offset >= self.lo


_NEVER = 1 << 63
