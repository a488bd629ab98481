"""Slots: the unit in which ``key_shared`` members divide a topic's key space.

Every key falls into one of 65,536 slots, ``slot_of(key)``: the first two bytes of its BLAKE3
digest read little-endian. BLAKE3 rather than murmur because slots are persisted in ZooKeeper and
compared across members, languages and versions, so the function must be a stable, well-specified
standard; it is also uniform, which keeps evenly split ranges evenly loaded. Members own
inclusive slot ranges (``SlotRange``), and a ``SlotMap`` answers "who owns this slot" in
O(log n) on the dispatch path.

Example::

    >>> ranges = split_evenly(2)
    >>> ranges
    [SlotRange(lo=0, hi=32767), SlotRange(lo=32768, hi=65535)]
    >>> owners = SlotMap({ranges[0]: "member-a", ranges[1]: "member-b"})
    >>> owners.owner_of(40000)
    'member-b'
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise

from blake3 import blake3

__all__ = [
    "MAX_SLOT",
    "SLOT_COUNT",
    "SlotMap",
    "SlotOverlapError",
    "SlotRange",
    "slot_of",
    "split_evenly",
]

SLOT_COUNT = 65536
"""Number of slots: two bytes of hash, fine-grained enough to move small slices of load."""
MAX_SLOT = SLOT_COUNT - 1


def slot_of(key: bytes) -> int:
    """Return the slot (0..65535) of ``key``: BLAKE3 digest bytes 0 and 1, little-endian."""
    digest = blake3(key).digest(2)
    return digest[0] | (digest[1] << 8)


@dataclass(frozen=True, order=True, slots=True)
class SlotRange:
    """An inclusive range of slots ``lo..hi``.

    :param lo: first slot in the range.
    :param hi: last slot in the range (inclusive), ``lo <= hi <= 65535``.
    """

    lo: int
    hi: int

    def __post_init__(self) -> None:
        for name, value in (("lo", self.lo), ("hi", self.hi)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"SlotRange.{name} must be an int, got {value!r}")
            if not 0 <= value <= MAX_SLOT:
                raise ValueError(f"SlotRange.{name} must be in 0..{MAX_SLOT}, got {value}")
        if self.lo > self.hi:
            raise ValueError(f"SlotRange.lo ({self.lo}) must not exceed SlotRange.hi ({self.hi})")

    @classmethod
    def parse(cls, text: str) -> SlotRange:
        """Parse ``"lo-hi"`` (or a single ``"slot"``), as an operator types it on the CLI."""
        lo_text, sep, hi_text = text.strip().partition("-")
        try:
            lo = int(lo_text)
            hi = int(hi_text) if sep else lo
        except ValueError:
            raise ValueError(f"slot range must look like 'lo-hi', got {text!r}") from None
        return cls(lo, hi)

    @property
    def size(self) -> int:
        """Number of slots in the range."""
        return self.hi - self.lo + 1

    def __contains__(self, slot: object) -> bool:
        return isinstance(slot, int) and self.lo <= slot <= self.hi

    def overlaps(self, other: SlotRange) -> bool:
        """Whether the two ranges share at least one slot."""
        return self.lo <= other.hi and other.lo <= self.hi

    def __str__(self) -> str:
        return f"{self.lo}-{self.hi}"


class SlotOverlapError(ValueError):
    """Raised when two ranges given to a ``SlotMap`` share slots."""


def _by_bounds(pair: tuple[SlotRange, str]) -> tuple[int, int]:
    return pair[0].lo, pair[0].hi


class SlotMap:
    """Non-overlapping slot ranges, each owned by a member id; gaps are unowned.

    :param assignments: ranges and their owners, as a mapping or as ``(range, member)`` pairs.
    :raises SlotOverlapError: when two ranges overlap; the message names both and their owners.
    """

    __slots__ = ("_his", "_items", "_los", "_owners", "_ranges")

    def __init__(
        self, assignments: Mapping[SlotRange, str] | Iterable[tuple[SlotRange, str]] = ()
    ) -> None:
        pairs = assignments.items() if isinstance(assignments, Mapping) else assignments
        checked = list(pairs)
        for slot_range, owner in checked:
            if not isinstance(slot_range, SlotRange) or not isinstance(owner, str):
                raise TypeError(f"expected (SlotRange, str) pairs, got {(slot_range, owner)!r}")
        # By bounds, not by the dataclass's generated comparison: a 1,000-member plan builds
        # maps of thousands of ranges, and the generated ``__lt__`` was most of its time.
        ordered: list[tuple[SlotRange, str]] = sorted(checked, key=_by_bounds)
        for (left, left_owner), (right, right_owner) in pairwise(ordered):
            if left.overlaps(right):
                raise SlotOverlapError(
                    f"slot range {left} (owner {left_owner!r}) overlaps "
                    f"slot range {right} (owner {right_owner!r})"
                )
        self._ranges: list[SlotRange] = [slot_range for slot_range, _ in ordered]
        self._owners: list[str] = [owner for _, owner in ordered]
        self._items = ordered
        self._los = [slot_range.lo for slot_range in self._ranges]
        self._his = [slot_range.hi for slot_range in self._ranges]

    def owner_of(self, slot: int) -> str | None:
        """Return the member owning ``slot``, or ``None`` when no range covers it."""
        index = bisect_right(self._los, slot) - 1
        if index >= 0 and slot <= self._his[index]:
            return self._owners[index]
        return None

    def ranges_of(self, member: str) -> list[SlotRange]:
        """The ranges owned by ``member``, in slot order."""
        return [slot_range for slot_range, owner in self._items if owner == member]

    @property
    def members(self) -> frozenset[str]:
        """Every member that owns at least one range."""
        return frozenset(self._owners)

    def unowned(self) -> list[SlotRange]:
        """The gaps: maximal ranges of slots that no member owns, in slot order."""
        gaps: list[SlotRange] = []
        next_free = 0
        for slot_range in self._ranges:
            if slot_range.lo > next_free:
                gaps.append(SlotRange(next_free, slot_range.lo - 1))
            next_free = slot_range.hi + 1
        if next_free <= MAX_SLOT:
            gaps.append(SlotRange(next_free, MAX_SLOT))
        return gaps

    def items(self) -> list[tuple[SlotRange, str]]:
        """``(range, member)`` pairs in slot order."""
        return list(self._items)

    def __iter__(self) -> Iterator[SlotRange]:
        return iter(self._ranges)

    def __len__(self) -> int:
        return len(self._ranges)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SlotMap) and self.items() == other.items()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        body = ", ".join(f"{r}: {owner!r}" for r, owner in self.items())
        return f"SlotMap({{{body}}})"


def subtract(lo: int, hi: int, holes: Iterable[SlotRange]) -> list[tuple[int, int]]:
    """The parts of the inclusive interval ``[lo, hi]`` outside every hole, in slot order.

    >>> subtract(0, 99, [SlotRange(10, 19), SlotRange(50, 200)])
    [(0, 9), (20, 49)]
    """
    pieces = [(lo, hi)]
    for hole in holes:
        next_pieces: list[tuple[int, int]] = []
        for a, b in pieces:
            if hole.hi < a or b < hole.lo:
                next_pieces.append((a, b))
                continue
            if a < hole.lo:
                next_pieces.append((a, hole.lo - 1))
            if hole.hi < b:
                next_pieces.append((hole.hi + 1, b))
        pieces = next_pieces
    return pieces


def split_evenly(count: int) -> list[SlotRange]:
    """Split the whole slot space into ``count`` contiguous ranges whose sizes differ by <= 1.

    :raises ValueError: when ``count`` is not in ``1..65536``.
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= SLOT_COUNT:
        raise ValueError(f"count must be an integer in 1..{SLOT_COUNT}, got {count!r}")
    base, extra = divmod(SLOT_COUNT, count)
    ranges: list[SlotRange] = []
    lo = 0
    for index in range(count):
        size = base + (1 if index < extra else 0)
        ranges.append(SlotRange(lo, lo + size - 1))
        lo += size
    return ranges
