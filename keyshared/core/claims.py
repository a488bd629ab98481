"""Claims: where each slot range a member holds resumes in one partition, and what is done.

In ``key_shared`` mode every member reads the whole partition and runs only the records whose
slot it holds. Each range's progress is stored as a cursor per partition (offset: every record
of the range below it is done; plus the finished offsets above it). Ranges split and merge
between generations, so the cursors covering a slot may have been written under several range
shapes; the one that counts for a slot is the one written by the **latest holder** (the highest
fencing token), because every holder starts from its predecessor's cursor and only moves it on.
Picking the lowest offset instead would be safe but would redo everything since a range was
last re-shaped.

A member therefore starts a partition at the lowest resume point of its pieces, and on the way
up counts as done every record that its piece's cursor already covers.

Example::

    >>> from keyshared.core.slots import SlotRange
    >>> stored = [StoredCursor(SlotRange(0, 65535), offset=100, token=1),
    ...           StoredCursor(SlotRange(0, 32767), offset=250, token=3, finished={260})]
    >>> claims = PartitionClaims.resolve([(SlotRange(0, 65535), 7)], stored, base=0)
    >>> claims.start
    100
    >>> claims.is_done(slot=10, offset=255), claims.is_done(slot=10, offset=260)
    (False, True)
    >>> claims.is_done(slot=40000, offset=150)
    False
    >>> claims.token_of(40000)
    7
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass, field
from itertools import pairwise

from keyshared.core.runs import EMPTY_RUNS, OffsetRuns
from keyshared.core.slots import MAX_SLOT, SlotRange

__all__ = ["PartitionClaims", "Piece", "StoredCursor", "superseded"]


@dataclass(frozen=True)
class StoredCursor:
    """A range's cursor in one partition, as the coordinator stored it.

    :param slots: the range it was written for.
    :param offset: every record of the range below it is done.
    :param token: the writer's fencing token: later holders write larger ones.
    :param finished: offsets above ``offset`` already done.
    :param version: the order of writes (ZooKeeper's zxid of the write): of two cursors of one
        lease (one token), the later one knows more.
    """

    slots: SlotRange
    offset: int
    token: int
    finished: Set[int] = EMPTY_RUNS
    version: int = 0


@dataclass(frozen=True)
class Piece:
    """A run of held slots with one resume point (the latest cursor covering them)."""

    slots: SlotRange
    start: int
    finished: OffsetRuns
    token: int  # the fencing token of the held range this piece belongs to
    source: int = -1  # the token of the cursor it resumes from (-1: the partition's base)


@dataclass
class PartitionClaims:
    """The held slots of one partition, split into pieces that share a resume point.

    Built by :meth:`resolve`; consulted per record at admission (``is_done``, ``holds``) and
    when a record is handed to its handler (``token_of``). Lookups are a binary search over
    the pieces, of which there are few (one per held range and cursor shape).
    """

    pieces: list[Piece] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pieces.sort(key=lambda piece: piece.slots.lo)
        self._los = [piece.slots.lo for piece in self.pieces]

    @classmethod
    def resolve(
        cls,
        held: Iterable[tuple[SlotRange, int]],
        stored: Iterable[StoredCursor],
        base: int,
    ) -> PartitionClaims:
        """Pieces for the ``(range, token)`` pairs held, from the cursors stored for them.

        :param held: the ranges this member holds, each with its lease's fencing token.
        :param stored: every stored cursor of this partition (any range shape).
        :param base: where slots that no cursor covers start: the group's committed offset, or
            the reset position for a partition never consumed.
        """
        cursors = sorted(stored, key=lambda c: (c.token, c.version))
        pieces: list[Piece] = []
        for held_range, token in held:
            for lo, hi, cursor in _latest_cover(held_range, cursors):
                if cursor is None:
                    pieces.append(Piece(SlotRange(lo, hi), base, EMPTY_RUNS, token))
                else:
                    finished = OffsetRuns.coerce(cursor.finished)
                    pieces.append(
                        Piece(SlotRange(lo, hi), cursor.offset, finished, token, cursor.token)
                    )
        return cls(pieces)

    @property
    def start(self) -> int | None:
        """Where reading must start so that no held record is missed (None: nothing held)."""
        return min((piece.start for piece in self.pieces), default=None)

    def _piece(self, slot: int) -> Piece | None:
        index = bisect_right(self._los, slot) - 1
        if index < 0:
            return None
        piece = self.pieces[index]
        return piece if slot <= piece.slots.hi else None

    def holds(self, slot: int) -> bool:
        return self._piece(slot) is not None

    def is_done(self, slot: int, offset: int) -> bool:
        """Whether a record of a held slot was already done by an earlier holder."""
        piece = self._piece(slot)
        if piece is None:
            raise KeyError(f"slot {slot} is not held")
        return offset < piece.start or offset in piece.finished

    def accepts(self, slot: int, offset: int) -> bool:
        """Whether this member runs the record: its slot is held and it is not done yet."""
        piece = self._piece(slot)
        return piece is not None and offset >= piece.start and offset not in piece.finished

    def token_of(self, slot: int) -> int | None:
        piece = self._piece(slot)
        return None if piece is None else piece.token


def _latest_cover(
    target: SlotRange, cursors: list[StoredCursor]
) -> list[tuple[int, int, StoredCursor | None]]:
    """Split ``target`` into maximal runs covered by the same latest cursor (``cursors`` sorted
    by token then version, ascending; None where no cursor covers a run)."""
    bounds = {target.lo, target.hi + 1}
    for cursor in cursors:
        if cursor.slots.overlaps(target):
            bounds.add(max(cursor.slots.lo, target.lo))
            bounds.add(min(cursor.slots.hi, target.hi) + 1)
    edges = sorted(bounds)
    runs: list[tuple[int, int, StoredCursor | None]] = []
    for lo, nxt in pairwise(edges):
        hi = nxt - 1
        cover = None
        for cursor in reversed(cursors):  # latest first
            if cursor.slots.lo <= lo and hi <= cursor.slots.hi:
                cover = cursor
                break
        if runs and runs[-1][2] is cover and runs[-1][1] == lo - 1:
            runs[-1] = (runs[-1][0], hi, cover)
        else:
            runs.append((lo, hi, cover))
    return runs


def superseded(cursors: Sequence[StoredCursor]) -> list[int]:
    """Indices of the cursors (of one partition) that no slot resolves to any more: a later
    cursor (higher token, or the same token written later) covers every slot of theirs.

    Ranges split and merge with every plan and each shape keeps its own cursor, so a group
    collects them; a member's re-read reads them all, and the 30-minute chaos run's re-reads
    grew from 0.02 s to 2.7 s as thousands piled up. Deleting these changes no resolution
    (:meth:`PartitionClaims.resolve` picks the latest cover of each slot), so they can go.
    Cursors tied on (token, version) were written in one transaction, for disjoint pieces:
    only strictly later ones supersede.
    """
    order = sorted(range(len(cursors)), key=lambda i: (cursors[i].token, cursors[i].version))
    covered: list[tuple[int, int]] = []  # disjoint, sorted, non-adjacent slot runs
    dead: list[int] = []
    while order:
        newest = (cursors[order[-1]].token, cursors[order[-1]].version)
        tied = []
        while order and (cursors[order[-1]].token, cursors[order[-1]].version) == newest:
            tied.append(order.pop())
        dead += [i for i in tied if _inside(covered, cursors[i].slots)]
        for i in tied:
            _cover(covered, cursors[i].slots)
    return sorted(dead)


def _inside(runs: list[tuple[int, int]], slots: SlotRange) -> bool:
    index = bisect_right(runs, (slots.lo, MAX_SLOT + 1)) - 1
    return index >= 0 and runs[index][0] <= slots.lo and slots.hi <= runs[index][1]


def _cover(runs: list[tuple[int, int]], slots: SlotRange) -> None:
    """Add ``slots`` to ``runs``, merging what overlaps or touches it."""
    lo, hi = slots.lo, slots.hi
    first = bisect_right(runs, (lo, MAX_SLOT + 1)) - 1
    if first < 0 or runs[first][1] < lo - 1:
        first += 1
    last = first
    while last < len(runs) and runs[last][0] <= hi + 1:
        lo, hi = min(lo, runs[last][0]), max(hi, runs[last][1])
        last += 1
    runs[first:last] = [(lo, hi)]
