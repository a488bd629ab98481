"""The range assignment planner: who owns which slots after members join, leave or are pinned.

In ``key_shared`` mode the members of a group split the 65,536 slots of the key space
(:mod:`keyshared.core.slots`). Every change of ownership costs a *drain*: the new owner may not
start on a moved range until the old owner finished what it holds there. So the planner is
**sticky** first and **balanced** second:

- a member keeps every slot it owns up to its fair share; only the excess of a member above its
  share, and the slots of members that left, move;
- shares differ by at most one slot, unless an operator's pins force more onto a member;
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

    kept: list[_Segment] = []
    pool: list[_Segment] = []
    room = dict(quotas)
    for lo, hi, owner in free:  # slot order: each member keeps its lowest slots up to quota
        if owner is None or owner not in room or room[owner] == 0:
            pool.append((lo, hi, None))
            continue
        take = min(room[owner], hi - lo + 1)
        room[owner] -= take
        kept.append((lo, lo + take - 1, owner))
        if lo + take <= hi:
            pool.append((lo + take, hi, None))

    given: list[_Segment] = []
    needy = [member for member in live if room[member] > 0]
    for lo, hi, _ in pool:
        while lo <= hi and needy:
            member = needy[0]
            take = min(room[member], hi - lo + 1)
            given.append((lo, lo + take - 1, member))
            room[member] -= take
            lo += take
            if room[member] == 0:
                needy.pop(0)
    after = sorted(kept + given + [(r.lo, r.hi, m) for r, m in applied])
    assignment = SlotMap((SlotRange(lo, hi), owner) for lo, hi, owner in _merge(after) if owner)
    return Plan(assignment, _moves(before, after), ignored)


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
