"""The range assignment planner: who owns which slots after members join, leave or are pinned.

In ``key_shared`` mode the members of a group split the 65,536 slots of the key space
(:mod:`keyshared.core.slots`). Every change of ownership costs a *drain* (the new owner may not
start on a moved range until the old owner finished what it holds there) and every member a
plan touches re-reads cursors; every range a member holds is a lease and a cursor transaction.
So the planner is **sticky** and **local** first and balanced only within a tolerance:

- **Tolerance.** Every member holds between :data:`LOW_SHARE` (0.75) and :data:`HIGH_SHARE`
  (1.25) of the fair share ``ceil(65,536 / N)``, rounded to whole slots (:func:`share_bounds`;
  pins aside). While that holds and nobody left, nothing moves: planning again moves nothing.
  The cost in hot-key terms: with keys spread evenly the busiest member carries at most 1.25
  times its fair share, so in the worst case a group runs at N / 1.25 members' worth of
  throughput (80 %); under churn most members stay between 0.87 and 1.25 (docs/scaling.md).
- **Join.** A member that holds nothing takes its fair share from at most
  :data:`MAX_PARTNERS` (7) donors, the most loaded first, water-filling them down (never below
  the least share, and when it can not within :data:`_SOFT` of it). Each donor cuts one piece
  from the *edge* of one of its ranges, so a donor never gains a range; it cuts where the piece
  joins something (slots moving anyway, the receiver's range, or another donor's facing edge,
  which then cuts there too: the newcomer gets one range across the boundary).
- **Leave.** The leaver's slots lift the members fallen well below the fair share first, then
  go to the members bordering them, up to the most share (the piece joins their range: no new
  range), and the rest to the least loaded, water-filling them up. At most 7 recipients.
- So one join or leave touches at most 8 members (the one that joins or leaves included) and
  moves about 1 / N of the key space: a joiner takes its fair share, a leaver's share (at most
  1.25 / N) is all that moves. More members only when the bounds need them (several events in
  one plan, pins, a map from elsewhere).
- **Ranges.** A member holding :data:`MAX_RANGES` (16) ranges receives only pieces that join
  one of its ranges (a piece of its own goes to another member with room, as far as the bounds
  allow); a donor holding :data:`_CROWDED` (8) or more gives one whole small range first. Under
  steady churn members hold 2-5 ranges on average and at most 16 (docs/scaling.md), whatever
  the history.
- A member never both gains and loses in one plan; the result does not depend on the order
  members are listed in.

Pins are the operator's manual reassignments (``keyshared assign``): a pinned range belongs to
its member whatever the balance says, and the bounds count pins in (a member whose pins reach
the fair share gets nothing else).

Why the drain rules still hold: the planner only decides *which* slots change owner, and
:attr:`Plan.moves` names exactly the slots whose owner differs between the assignment in force
and the new one (``test_assignment.py`` checks it slot by slot). The coordinator drains, leases
and fences each of them as before; the tolerance changes only how many move.

The planner is pure: the coordinator feeds it the current map and the live members, writes the
result to ZooKeeper, and runs the drains that the returned :class:`Move` list names.

Example::

    >>> first = plan_assignment(SlotMap(), ["a", "b"])
    >>> first.assignment.ranges_of("b")
    [SlotRange(lo=32768, hi=65535)]
    >>> joined = plan_assignment(first.assignment, ["a", "b", "c"])
    >>> [(str(m.slots), m.source, m.target) for m in joined.moves]
    [('21845-32767', 'a', 'c'), ('32768-43689', 'b', 'c')]
    >>> joined.assignment.ranges_of("c")  # one range across the boundary of its two donors
    [SlotRange(lo=21845, hi=43689)]
    >>> plan_assignment(joined.assignment, ["a", "b", "c"]).moves
    ()
    >>> share_bounds(["a", "b", "c"])["a"]  # 0.75 and 1.25 of ceil(65536 / 3)
    (16385, 27307)
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from keyshared.core.slots import MAX_SLOT, SlotMap, SlotRange, subtract

__all__ = [
    "HIGH_SHARE",
    "LOW_SHARE",
    "MAX_PARTNERS",
    "MAX_RANGES",
    "Move",
    "Plan",
    "plan_assignment",
    "share_bounds",
]

LOW_SHARE = 0.75
"""A member holding less than this fraction of the fair share is topped up to the fair share."""

HIGH_SHARE = 1.25
"""No member holds more than this fraction of the fair share (pins aside): the hot-key bound."""

MAX_PARTNERS = 7
"""Donors a join takes from (or recipients a leave hands to), unless balance needs more: with the
member that joins or leaves, one event touches at most 8 members."""

MAX_RANGES = 16
"""A member holding this many ranges receives only pieces that join one of its ranges."""

_SOFT = 0.1
"""Of the fair share: when the planner moves slots anyway, it leaves donors at least this far
above the least share and recipients this far below the most (when it can), so that the next
events find room without touching more members."""

_CROWDED = 8
"""A donor holding this many ranges gives one whole small range first (it then holds one
fewer): the only force that undoes fragmentation besides pieces joining their neighbours."""

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
    """Plan who owns which slots: nothing moves while every member's share is within the
    tolerance, and an event moves what it must through few members.

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
    pinned = {member: 0 for member in live}
    for slot_range, member in applied:
        pinned[member] += slot_range.size
    free = _subtract(_merge(before), applied) if applied else _merge(before)
    held = dict.fromkeys(live, 0)
    ranges = dict.fromkeys(live, 0)
    for lo, hi, owner in free:
        if owner in held:
            held[owner] += hi - lo + 1
            ranges[owner] += 1
    free_slots = sum(hi - lo + 1 for lo, hi, _ in free)
    level = _level(live, pinned, free_slots)
    bounds = _bounds(live, pinned, level)
    quotas = _quotas(live, pinned, held, level, free_slots)
    gains, gives = _transfers(free, held, quotas, bounds, ranges, level)
    kept, pool = _release(free, set(live), gives, set(gains))
    given = _distribute(kept, pool, gains, ranges, held, bounds, set(gives))
    after = sorted(kept + given + [(r.lo, r.hi, m) for r, m in applied])
    known = {(r.lo, r.hi): r for r in current}  # most ranges stay: reuse, not re-validate
    assignment = SlotMap(
        (known.get((lo, hi)) or SlotRange(lo, hi), owner)
        for lo, hi, owner in _merge(after)
        if owner
    )
    return Plan(assignment, _moves(before, after), ignored)


def share_bounds(
    members: Iterable[str],
    pins: Mapping[SlotRange, str] | Iterable[tuple[SlotRange, str]] = (),
) -> dict[str, tuple[int, int]]:
    """The slots (pins included) each live member may hold once a plan is in force: between
    :data:`LOW_SHARE` and :data:`HIGH_SHARE` of the fair share, and exactly its pins when they
    reach the fair share already. Rounding widens the interval to whole slots."""
    live = sorted(set(members))
    if not live:
        return {}
    pinned = dict.fromkeys(live, 0)
    pinned_total = 0
    for slot_range, member in SlotMap(pins).items():
        if member in pinned:
            pinned[member] += slot_range.size
            pinned_total += slot_range.size
    bounds = _bounds(live, pinned, _level(live, pinned, MAX_SLOT + 1 - pinned_total))
    return {m: (pinned[m] + lo, pinned[m] + hi) for m, (lo, hi) in bounds.items()}


def _level(live: list[str], pinned: dict[str, int], free: int) -> int:
    """The fair share (pins included): the lowest level whose room ``sum(max(0, level -
    pinned))`` covers the free slots. Without pins, ``ceil(free / members)``."""
    if not any(pinned.values()):
        return -(-free // len(live))
    lo, hi = 0, MAX_SLOT + 1
    while lo < hi:
        level = (lo + hi) // 2
        if sum(max(0, level - pinned[m]) for m in live) >= free:
            hi = level
        else:
            lo = level + 1
    return lo


def _bounds(live: list[str], pinned: dict[str, int], level: int) -> dict[str, tuple[int, int]]:
    """Unpinned slots each member may hold: (least, most). A member whose pins reach the fair
    share holds no other slot."""
    least = min(math.ceil(LOW_SHARE * level), level - 1)
    most = max(math.floor(HIGH_SHARE * level), level)
    return {
        m: (0, 0) if p >= level else (max(0, least - p), most - p)
        for m, p in ((m, pinned[m]) for m in live)
    }


def _quotas(
    live: list[str], pinned: dict[str, int], held: dict[str, int], level: int, free: int
) -> dict[str, int]:
    """The exact fair share of unpinned slots, what a member that is topped up receives: every
    member below ``level`` filled to ``level - 1``, and the remainder (one slot each) to the
    members holding the most beyond that, so that fewer slots move."""
    quotas = {m: max(0, level - 1 - pinned[m]) for m in live}
    remainder = free - sum(quotas.values())
    at_level = [m for m in live if pinned[m] <= level - 1]
    at_level.sort(key=lambda m: (quotas[m] - held[m], m))  # most held beyond its base first
    for member in at_level[:remainder]:
        quotas[member] += 1
    return quotas


def _transfers(
    free: list[_Segment],
    held: dict[str, int],
    quotas: dict[str, int],
    bounds: dict[str, tuple[int, int]],
    ranges: dict[str, int],
    level: int,
) -> tuple[dict[str, int], dict[str, int]]:
    """How many slots each member gains or gives, none both.

    Forced first: a member above its most share gives the excess, a member that holds nothing
    is given its quota, and one fallen below its least share is topped up (to its quota as far
    as spare slots go, to its least share at the very least). Then the balance:

    - slots missing come from the most loaded members, water-filling them down;
    - spare slots (those of members that left) first lift the members below the soft floor (the
      quota less :data:`_SOFT`), then go to the members bordering them, up to the most share
      (they join their ranges), and the rest to the least loaded members, water-filling them up.

    :data:`MAX_PARTNERS` members in all besides the forced ones, unless the bounds need more.
    """
    live = sorted(held)
    margin = round(_SOFT * level)
    orphaned = sum(hi - lo + 1 for lo, hi, owner in free if owner not in held)
    gives = {m: held[m] - bounds[m][1] for m in live if held[m] > bounds[m][1]}
    supply = orphaned + sum(gives.values())
    low = sorted((m for m in live if held[m] < bounds[m][0]), key=lambda m: (held[m], m))
    want = {m: quotas[m] - held[m] for m in low}
    must = {m: want[m] if held[m] == 0 else bounds[m][0] - held[m] for m in low}
    if supply >= sum(want.values()):
        gains = dict(want)
    else:
        gains = dict(must)
        extra = supply - sum(must.values())
        if extra > 0:
            load = {m: held[m] + must[m] for m in low}
            top = {m: quotas[m] for m in low}
            for member, amount in _fill(low, load, (top, top), extra, len(low), False).items():
                gains[member] += amount
    balance = supply - sum(gains.values())
    if balance < 0:
        load = {m: held[m] - gives.get(m, 0) for m in live if m not in gains}
        floor = {m: bounds[m][0] for m in load}
        soft = {m: min(load[m], max(floor[m], quotas[m] - margin)) for m in load}
        order = sorted(load, key=lambda m: (m not in gives, -(load[m] - quotas[m]), m))
        filled = _fill(order, load, (soft, floor), -balance, len(gives), down=True)
        for member, amount in filled.items():
            gives[member] = gives.get(member, 0) + amount
    elif balance > 0:
        load = {m: held[m] + gains.get(m, 0) for m in live if m not in gives}
        near = _orphan_neighbours(free, held)
        ceiling = {  # a member at the range cap takes only what joins its ranges
            m: min(bounds[m][1], load[m] + near.get(m, 0) if ranges[m] >= MAX_RANGES else MAX_SLOT)
            for m in load
        }

        def add(filled: dict[str, int]) -> int:
            for member, amount in filled.items():
                gains[member] = gains.get(member, 0) + amount
                load[member] += amount
            return sum(filled.values())

        crowded = {m for m in load if ranges[m] >= MAX_RANGES - 2 and m not in near}
        below = [m for m in load if load[m] < quotas[m] - margin and m not in gains]
        urgent = sorted(
            (m for m in below if m not in crowded),
            key=lambda m: (m not in near, load[m] - quotas[m], m),
        )[:MAX_PARTNERS]
        if urgent:
            top = {m: min(ceiling[m], quotas[m]) for m in urgent}
            room = sum(max(0, top[m] - load[m]) for m in urgent)
            balance -= add(_fill(urgent, load, (top, top), min(balance, room), 0, False))
        lifted = len(set(gains) - set(want))
        balance -= add(
            _to_neighbours(free, held, load, ceiling, balance, set(gains), MAX_PARTNERS - lifted)
        )

        def rank(m: str) -> tuple[bool, bool, int, str]:
            return (m not in gains, m in crowded, load[m] - quotas[m], m)

        if balance:
            if sum(max(0, ceiling[m] - load[m]) for m in load) < balance:
                ceiling = {m: bounds[m][1] for m in load}  # the cap yields to the bounds
            order = sorted(load, key=rank)
            soft = {m: max(load[m], min(ceiling[m], quotas[m] + margin)) for m in load}
            touched = sum(1 for m in load if m in gains)
            add(_fill(order, load, (soft, ceiling), balance, touched, down=False))
    return gains, gives


def _fill(
    order: list[str],
    load: dict[str, int],
    limits: tuple[dict[str, int], dict[str, int]],
    amount: int,
    touched: int,
    down: bool,
) -> dict[str, int]:
    """Water-fill ``amount`` slots out of (``down``) or into the first members of ``order``:
    the first ``MAX_PARTNERS`` (or ``touched``, when more are touched anyway), more only when
    their room within the hard limits (``limits[1]``) falls short; within the soft limits
    (``limits[0]``) when those leave room enough. Returns what each member gives or gains."""

    def room(m: str, limit: dict[str, int]) -> int:
        return max(0, load[m] - limit[m]) if down else max(0, limit[m] - load[m])

    count = max(MAX_PARTNERS, touched)
    while count < len(order) and sum(room(m, limits[1]) for m in order[:count]) < amount:
        count += MAX_PARTNERS
    chosen = order[:count]
    limit = limits[0] if sum(room(m, limits[0]) for m in chosen) >= amount else limits[1]

    def moved(level: int) -> int:
        if down:
            return sum(max(0, load[m] - max(level, limit[m])) for m in chosen)
        return sum(max(0, min(level, limit[m]) - load[m]) for m in chosen)

    lo, hi = 0, MAX_SLOT + 1
    if down:  # the lowest level at which the donors give no more than ``amount``
        while lo < hi:
            level = (lo + hi) // 2
            if moved(level) <= amount:
                hi = level
            else:
                lo = level + 1
    else:  # the highest level at which the recipients take no more than ``amount``
        while lo < hi:
            level = (lo + hi + 1) // 2
            if moved(level) <= amount:
                lo = level
            else:
                hi = level - 1
    level = lo
    if down:
        out = {m: max(0, load[m] - max(level, limit[m])) for m in chosen}
        edge = sorted(
            (m for m in chosen if load[m] >= level and limit[m] <= level - 1),
            key=lambda m: (-load[m], m),
        )
    else:
        out = {m: max(0, min(level, limit[m]) - load[m]) for m in chosen}
        edge = sorted(
            (m for m in chosen if load[m] <= level and limit[m] >= level + 1),
            key=lambda m: (load[m], m),
        )
    for member in edge[: amount - sum(out.values())]:
        out[member] += 1
    assert sum(out.values()) == amount, "the bounds leave no room for the slots to move"
    return {m: n for m, n in out.items() if n > 0}


def _to_neighbours(
    free: list[_Segment],
    held: dict[str, int],
    load: dict[str, int],
    reach: dict[str, int],
    spare: int,
    touched: set[str],
    budget: int,
) -> dict[str, int]:
    """Spare slots to the members bordering them, each up to its ``reach``, the lighter of the
    two first: the piece then joins its range instead of making a new one. Largest stretches
    first, and at most ``budget`` members not in ``touched``."""
    runs: list[tuple[int, str, str]] = []  # (size, left neighbour, right neighbour)
    index = 0
    while index < len(free):
        lo, hi, owner = free[index]
        if owner in held:
            index += 1
            continue
        left = free[index - 1][2] if index and free[index - 1][1] + 1 == lo else None
        end = index
        while end + 1 < len(free) and free[end + 1][2] not in held and free[end + 1][0] == hi + 1:
            end += 1
            hi = free[end][1]
        right = free[end + 1][2] if end + 1 < len(free) and free[end + 1][0] == hi + 1 else None
        runs.append((hi - lo + 1, left or "", right or ""))
        index = end + 1
    taken: dict[str, int] = {}
    for size, left, right in sorted(runs, key=lambda run: (-run[0], run[1], run[2])):
        sides = sorted({left, right} & set(load), key=lambda m: (load[m] + taken.get(m, 0), m))
        for member in sides:
            new = member not in touched and member not in taken
            if new and budget <= 0:
                continue
            amount = min(size, spare, reach[member] - load[member] - taken.get(member, 0))
            if amount <= 0:
                continue
            budget -= new
            taken[member] = taken.get(member, 0) + amount
            size -= amount
            spare -= amount
    return taken


def _orphan_neighbours(free: list[_Segment], held: dict[str, int]) -> dict[str, int]:
    """Live members whose ranges border slots that must move, and how many such slots each
    borders (a piece handed to one of them joins its range instead of making a new one)."""
    near: dict[str, int] = {}
    for index, (lo, hi, owner) in enumerate(free):
        if owner in held:
            continue
        for other in (index - 1, index + 1):
            if 0 <= other < len(free):
                a, b, neighbour = free[other]
                if neighbour in held and (b + 1 == lo or a == hi + 1):
                    # half: the member on the other side may take the rest
                    near[neighbour] = near.get(neighbour, 0) + (hi - lo + 1) // 2
    return near


def _release(
    free: list[_Segment], live: set[str], gives: dict[str, int], receivers: set[str]
) -> tuple[list[_Segment], list[tuple[int, int]]]:
    """Cut what each donor gives from the edges of its ranges (a donor never gains a range), and
    return what stays and the pool of slots to hand out (theirs and those of members that left).

    A donor cuts where the piece joins something: slots moving anyway, a receiver's range, or
    the facing edge of another donor (which then cuts there too), so that the receiver gets few
    ranges. A donor whose gift is larger than each of its ranges gives whole ranges first,
    which leaves it holding fewer.
    """
    released: dict[int, tuple[int, int]] = {}  # segment -> part let go (the whole, or one end)
    remaining = dict(gives)
    by_owner: dict[str, list[int]] = {}
    for index, (_, _, owner) in enumerate(free):
        if owner in gives:
            by_owner.setdefault(owner, []).append(index)

    def size(index: int) -> int:
        return free[index][1] - free[index][0] + 1

    def score(index: int, high: bool) -> int:
        """What a piece cut at this end of the segment joins: slots moving anyway (3), a
        receiver's range (2), another donor's edge that can be cut to face it (1)."""
        other = index + 1 if high else index - 1
        if not 0 <= other < len(free):
            return 0
        lo, hi, owner = free[other]
        if free[index][1] + 1 != lo if high else hi + 1 != free[index][0]:
            return 0  # a pin between them
        part = released.get(other)
        if owner not in live or (part is not None and part[0 if high else 1] == (lo, hi)[not high]):
            return 3
        if owner in receivers:
            return 2
        if remaining.get(owner) and other not in released and hi - lo + 1 >= remaining[owner]:
            return 1
        return 0

    for donor in sorted(gives):
        whole = False
        while remaining[donor] > 0:
            need = remaining[donor]
            untouched = [i for i in by_owner[donor] if i not in released]
            fitting = [i for i in untouched if size(i) >= need]
            small = [i for i in untouched if size(i) < need]
            if small and not whole and len(untouched) >= _CROWDED:
                index = min(small, key=lambda i: (size(i), free[i][0]))  # it had too many ranges
                released[index] = (free[index][0], free[index][1])
                remaining[donor] -= size(index)
                whole = True
            elif fitting:
                *_, high, index = max(
                    (score(i, high), size(i) == need, size(i), -free[i][0], high, i)
                    for i in fitting
                    for high in (False, True)
                )
                lo, hi, _ = free[index]
                released[index] = (hi - need + 1, hi) if high else (lo, lo + need - 1)
                remaining[donor] = 0
            else:
                index = max(
                    untouched,
                    key=lambda i: (max(score(i, False), score(i, True)), size(i), -free[i][0]),
                )
                released[index] = (free[index][0], free[index][1])
                remaining[donor] -= size(index)
    kept: list[_Segment] = []
    pool: list[tuple[int, int]] = []
    for index, (lo, hi, owner) in enumerate(free):
        part = released.get(index)
        if owner not in live:
            pool.append((lo, hi))
        elif part is None:
            kept.append((lo, hi, owner))
        else:
            pool.append(part)
            if part[0] > lo:
                kept.append((lo, part[0] - 1, owner))
            if part[1] < hi:
                kept.append((part[1] + 1, hi, owner))
    runs: list[tuple[int, int]] = []
    for lo, hi in sorted(pool):
        if runs and runs[-1][1] + 1 == lo:
            runs[-1] = (runs[-1][0], hi)
        else:
            runs.append((lo, hi))
    return kept, runs


def _distribute(
    kept: list[_Segment],
    pool: list[tuple[int, int]],
    gains: dict[str, int],
    ranges: dict[str, int],
    held: dict[str, int],
    bounds: dict[str, tuple[int, int]],
    givers: set[str],
) -> list[_Segment]:
    """Hand the pool to the members that gain. First every piece that borders one of them goes
    to it (it joins that member's range), then the largest pieces to the members with the most
    room. A member at :data:`MAX_RANGES` takes no piece of its own: a member with room below its
    most share (one that gains already first) takes the piece instead, as far as the capped
    member stays above its least share."""
    room = {m: n for m, n in gains.items() if n > 0}
    count = dict(ranges)
    ends = {hi: owner for _, hi, owner in kept}  # a segment's last slot -> its owner
    starts = {lo: owner for lo, _, owner in kept}
    given: list[_Segment] = []

    def take(lo: int, hi: int, member: str, from_low: bool, joins: bool) -> tuple[int, int]:
        """Give ``member`` what it can take of lo..hi from one end; return what is left."""
        size = min(room[member], hi - lo + 1)
        room[member] -= size
        if not joins:
            count[member] += 1
        if from_low:
            given.append((lo, lo + size - 1, member))
            ends[lo + size - 1] = member
            return lo + size, hi
        given.append((hi - size + 1, hi, member))
        starts[hi - size + 1] = member
        return lo, hi - size

    def neighbours(lo: int, hi: int) -> tuple[int, int]:
        """Give lo..hi to the gaining members it borders; return what is left."""
        while lo <= hi:
            left, right = ends.get(lo - 1), starts.get(hi + 1)
            if left is not None and room.get(left, 0) > 0:
                lo, hi = take(lo, hi, left, True, True)
            elif right is not None and room.get(right, 0) > 0:
                lo, hi = take(lo, hi, right, False, True)
            else:
                break
        return lo, hi

    rest: list[tuple[int, int, int]] = []  # (-size, lo, hi): the largest piece first
    for lo, hi in pool:
        lo, hi = neighbours(lo, hi)
        if lo <= hi:
            heapq.heappush(rest, (lo - hi - 1, lo, hi))
    needy = [(count[m] >= MAX_RANGES, -n, m) for m, n in room.items() if n > 0]
    heapq.heapify(needy)
    final = {m: held[m] + gains.get(m, 0) for m in held}
    slack = {m: bounds[m][1] - final[m] for m in held if m not in givers}
    shrink = {m: final[m] - bounds[m][0] for m in gains}
    stand_ins = sorted(slack, key=lambda m: (m not in gains, final[m], m))

    def substitute(member: str) -> str | None:
        if shrink[member] <= 0:
            return None
        for other in stand_ins:
            if other != member and slack[other] > 0 and count[other] < MAX_RANGES - 1:
                return other
        return None

    while rest:
        _, lo, hi = heapq.heappop(rest)
        lo, hi = neighbours(lo, hi)
        if lo > hi:
            continue
        while True:  # entries go stale as rooms shrink: check and push back the current one
            capped, negative_room, member = heapq.heappop(needy)
            current = (count[member] >= MAX_RANGES, -room[member], member)
            if room[member] > 0 and current == (capped, negative_room, member):
                break
            if room[member] > 0:
                heapq.heappush(needy, current)
        if count[member] >= MAX_RANGES and (stand_in := substitute(member)) is not None:
            moved = min(hi - lo + 1, room[member], shrink[member], slack[stand_in])
            room[member] -= moved
            shrink[member] -= moved
            slack[stand_in] -= moved
            room[stand_in] = room.get(stand_in, 0) + moved
            lo, hi = take(lo, hi, stand_in, True, False)
        else:
            lo, hi = take(lo, hi, member, True, False)
        if room[member] > 0:
            heapq.heappush(needy, (count[member] >= MAX_RANGES, -room[member], member))
        if lo <= hi:
            heapq.heappush(rest, (lo - hi - 1, lo, hi))
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
