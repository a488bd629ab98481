"""The range assignment planner: who owns which slots after members join, leave or are pinned.

In ``key_shared`` mode the members of a group split the 65,536 slots of the key space
(:mod:`keyshared.core.slots`). Every change of ownership costs a *drain*: the new owner may not
start on a moved range until the old owner finished what it holds there. So the planner is
**sticky** first and **balanced** second:

- a member keeps every slot it owns up to its fair share; only the excess of a member above its
  share, and the slots of members that left, move;
- shares differ by at most one slot, unless an operator's pins force more onto a member;
- what moves tends to join its new owner's ranges: a member lets go of whole small segments
  first and cuts next to slots that move anyway, and a piece goes to a neighbour that needs
  slots when there is one. Under the churn of a member replaced every few seconds members
  hold about three ranges instead of five to nine (``test_assignment.py``), and every range a
  plan touches costs its member a drain;
- the result does not depend on the order members are listed in, and planning again with the
  same members moves nothing.

Pins are the operator's manual reassignments (``keyshared assign``): a pinned range belongs to
its member whatever the balance says, and the remaining slots are balanced around it (a member
whose pins exceed its share gets nothing else).

The planner is pure: the coordinator feeds it the current map and the live members, writes the
result to ZooKeeper, and runs the drains that the returned :class:`Move` list names.

Example::

    >>> first = plan_assignment(SlotMap(), ["a", "b"])
    >>> first.assignment.ranges_of("b")
    [SlotRange(lo=32768, hi=65535)]
    >>> joined = plan_assignment(first.assignment, ["a", "b", "c"])
    >>> [(str(m.slots), m.source, m.target) for m in joined.moves]
    [('21846-32767', 'a', 'c'), ('54613-65535', 'b', 'c')]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from keyshared.core.slots import MAX_SLOT, SLOT_COUNT, SlotMap, SlotRange, subtract

__all__ = ["Move", "Plan", "plan_assignment"]

# (lo, hi, owner) with lo..hi inclusive; owner None for slots nobody owns
_Segment = tuple[int, int, str | None]


@dataclass(frozen=True, slots=True)
class Move:
    """Slots changing owner. ``source`` is the previous owner (None: nobody owned them), which
    may be a member that has left: its drain ends when its session does."""

    slots: SlotRange
    source: str | None
    target: str


@dataclass(frozen=True)
class Plan:
    """The target assignment and the moves that lead to it from the current one.

    :param assignment: every slot's owner (the whole space, when there is a member at all).
    :param moves: the ranges that change owner, in slot order; each needs a drain.
    :param ignored_pins: pins whose member is not live; they were not applied.
    """

    assignment: SlotMap
    moves: tuple[Move, ...]
    ignored_pins: tuple[tuple[SlotRange, str], ...] = field(default=())

    @property
    def moved_slots(self) -> int:
        return sum(move.slots.size for move in self.moves)


def plan_assignment(
    current: SlotMap,
    members: Iterable[str],
    pins: Mapping[SlotRange, str] | Iterable[tuple[SlotRange, str]] = (),
) -> Plan:
    """Plan who owns which slots, moving as few as balance allows.

    :param current: the assignment in force (may have gaps and owners that have left).
    :param members: the live members; an empty set leaves every slot unowned.
    :param pins: ranges the operator assigned by hand; they must not overlap each other.
    :raises SlotOverlapError: when two pins overlap.
    """
    live = sorted(set(members))
    pin_map = SlotMap(pins)  # validates: no overlaps
    applied = [(r, m) for r, m in pin_map.items() if m in live]
    ignored = tuple((r, m) for r, m in pin_map.items() if m not in live)
    before = _segments(current)
    if not live:
        return Plan(SlotMap(), (), ignored)
    pinned_slots = {member: 0 for member in live}
    for slot_range, member in applied:
        pinned_slots[member] += slot_range.size
    free = _subtract(before, applied)
    held = {member: 0 for member in live}
    for lo, hi, owner in free:
        if owner in held:
            held[owner] += hi - lo + 1
    quotas = _quotas(live, pinned_slots, held, sum(hi - lo + 1 for lo, hi, _ in free))

    kept, pool = _keep(free, quotas, held)
    given = _give(kept, pool, {m: quotas[m] - min(held[m], quotas[m]) for m in live})
    after = sorted(kept + given + [(r.lo, r.hi, m) for r, m in applied])
    assignment = SlotMap((SlotRange(lo, hi), owner) for lo, hi, owner in _merge(after) if owner)
    return Plan(assignment, _moves(before, after), ignored)


def _keep(
    free: list[_Segment], quotas: dict[str, int], held: dict[str, int]
) -> tuple[list[_Segment], list[tuple[int, int]]]:
    """Each live member keeps what it holds up to its quota; the rest is the pool.

    Which slots a member over its quota lets go decides how ranges fragment under churn (every
    plan change costs each member involved a drain, and a range made of many small pieces
    costs more): whole segments go first, smallest first, and the last cut is taken from the
    edge of a segment that borders slots moving anyway or a member that needs slots, so that
    what moves tends to join its new owner's range.
    """
    by_owner: dict[str, list[int]] = {}
    for index, (_, _, owner) in enumerate(free):
        if owner in quotas:
            by_owner.setdefault(owner, []).append(index)
    released: dict[int, tuple[int, int] | None] = {}  # segment -> part let go (None: all)
    for owner, indices in by_owner.items():
        excess = held[owner] - quotas[owner]
        if excess <= 0:
            continue
        for index in sorted(indices, key=lambda i: (free[i][1] - free[i][0], free[i][0])):
            size = free[index][1] - free[index][0] + 1
            if size > excess:
                break
            released[index] = None
            excess -= size
        if excess:
            index, low_end = _cut(free, [i for i in indices if i not in released], quotas, held)
            lo, hi, _ = free[index]
            released[index] = (lo, lo + excess - 1) if low_end else (hi - excess + 1, hi)
    kept: list[_Segment] = []
    pool: list[tuple[int, int]] = []
    for index, (lo, hi, owner) in enumerate(free):
        if owner not in quotas:
            pool.append((lo, hi))
        elif index not in released:
            kept.append((lo, hi, owner))
        elif (part := released[index]) is None:
            pool.append((lo, hi))
        else:
            pool.append(part)
            if part[0] == lo:
                kept.append((part[1] + 1, hi, owner))
            else:
                kept.append((lo, part[0] - 1, owner))
    pool.sort()
    return kept, pool


def _cut(
    free: list[_Segment], indices: list[int], quotas: dict[str, int], held: dict[str, int]
) -> tuple[int, bool]:
    """Where a member over its quota cuts its last excess: (segment, from its low end?)."""

    def moving(neighbour: int) -> int:
        if not 0 <= neighbour < len(free):
            return 0
        owner = free[neighbour][2]
        if owner not in quotas:
            return 2  # unowned or a member that left: those slots move anyway
        return 1 if held[owner] < quotas[owner] else 0  # a member that needs slots

    edges = []
    for index in indices:
        size = free[index][1] - free[index][0] + 1
        edges.append((moving(index - 1), size, -free[index][0], index, False, True))
        edges.append((moving(index + 1), size, -free[index][0], index, True, False))
    *_, index, _, low_end = max(edges)  # on a tie the high end: a member keeps its lowest slots
    return index, low_end


def _give(
    kept: list[_Segment], pool: list[tuple[int, int]], room: dict[str, int]
) -> list[_Segment]:
    """Hand the pool to the members below their quota. First every piece that borders a member
    needing slots goes to it (it joins that member's range), then the rest, in slot order, to
    the members with the most room."""
    room = dict(room)
    ends = {hi: owner for _, hi, owner in kept}  # a segment's last slot -> its owner
    starts = {lo: owner for lo, _, owner in kept}
    given: list[_Segment] = []

    def take(lo: int, hi: int, member: str, from_low: bool) -> tuple[int, int]:
        """Give ``member`` what it can take of lo..hi from one end; return what is left."""
        size = min(room[member], hi - lo + 1)
        room[member] -= size
        if from_low:
            given.append((lo, lo + size - 1, member))
            ends[lo + size - 1] = member
            return lo + size, hi
        given.append((hi - size + 1, hi, member))
        starts[hi - size + 1] = member
        return lo, hi - size

    def neighbours(lo: int, hi: int) -> tuple[int, int]:
        """Give lo..hi to the needy members it borders; return what is left."""
        while lo <= hi:
            left, right = ends.get(lo - 1), starts.get(hi + 1)
            if left is not None and room.get(left, 0) > 0:
                lo, hi = take(lo, hi, left, True)
            elif right is not None and room.get(right, 0) > 0:
                lo, hi = take(lo, hi, right, False)
            else:
                break
        return lo, hi

    rest = []
    for lo, hi in pool:
        lo, hi = neighbours(lo, hi)
        if lo <= hi:
            rest.append((lo, hi))
    for lo, hi in rest:
        lo, hi = neighbours(lo, hi)
        while lo <= hi:
            needy = sorted((m for m in room if room[m] > 0), key=lambda m: (-room[m], m))
            if not needy:
                break
            lo, hi = take(lo, hi, needy[0], True)
            lo, hi = neighbours(lo, hi)
    return given


def _segments(slot_map: SlotMap) -> list[_Segment]:
    """The whole slot space as segments, gaps included as owner None."""
    segments: list[_Segment] = []
    next_free = 0
    for slot_range, owner in slot_map.items():
        if slot_range.lo > next_free:
            segments.append((next_free, slot_range.lo - 1, None))
        segments.append((slot_range.lo, slot_range.hi, owner))
        next_free = slot_range.hi + 1
    if next_free <= MAX_SLOT:
        segments.append((next_free, MAX_SLOT, None))
    return segments


def _subtract(segments: list[_Segment], pins: list[tuple[SlotRange, str]]) -> list[_Segment]:
    """``segments`` with the pinned slots cut out."""
    out: list[_Segment] = []
    holes = [slot_range for slot_range, _ in pins]
    for lo, hi, owner in segments:
        out.extend((a, b, owner) for a, b in subtract(lo, hi, holes))
    return out


def _quotas(
    live: list[str], pinned: dict[str, int], held: dict[str, int], free: int
) -> dict[str, int]:
    """Unpinned slots per member, levelling total loads (pins included) as far as pins allow.

    Water-filling: find the lowest level L whose room ``sum(max(0, L - pinned))`` covers the
    free slots; everyone below L is filled to L - 1, and the remainder (one slot each) goes to
    the members holding the most beyond that, so that fewer slots move and planning again
    with the same members moves nothing.
    """
    lo, hi = 0, SLOT_COUNT
    while lo < hi:  # smallest level whose room covers every free slot
        level = (lo + hi) // 2
        if sum(max(0, level - pinned[m]) for m in live) >= free:
            hi = level
        else:
            lo = level + 1
    level = lo
    quotas = {m: max(0, level - 1 - pinned[m]) for m in live}
    remainder = free - sum(quotas.values())
    at_level = [m for m in live if pinned[m] <= level - 1]
    at_level.sort(key=lambda m: (quotas[m] - held[m], m))  # most held beyond its base first
    for member in at_level[:remainder]:
        quotas[member] += 1
    return quotas


def _merge(segments: list[_Segment]) -> list[_Segment]:
    """Adjacent segments of one owner joined into one."""
    merged: list[_Segment] = []
    for lo, hi, owner in segments:
        if merged and merged[-1][2] == owner and merged[-1][1] + 1 == lo:
            merged[-1] = (merged[-1][0], hi, owner)
        else:
            merged.append((lo, hi, owner))
    return merged


def _moves(before: list[_Segment], after: list[_Segment]) -> tuple[Move, ...]:
    """Where the owner differs, walking both segment lists in slot order."""
    moves: list[tuple[int, int, str | None, str]] = []
    i = j = 0
    slot = 0
    while slot <= MAX_SLOT and i < len(before) and j < len(after):
        _, b_hi, b_owner = before[i]
        _, a_hi, a_owner = after[j]
        end = min(b_hi, a_hi)
        if a_owner is not None and a_owner != b_owner:
            last = moves[-1] if moves else None
            if last and last[1] + 1 == slot and last[2] == b_owner and last[3] == a_owner:
                moves[-1] = (last[0], end, b_owner, a_owner)
            else:
                moves.append((slot, end, b_owner, a_owner))
        slot = end + 1
        if b_hi == end:
            i += 1
        if a_hi == end:
            j += 1
    return tuple(Move(SlotRange(lo, hi), source, target) for lo, hi, source, target in moves)
