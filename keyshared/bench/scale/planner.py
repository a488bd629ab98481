"""The planner at scale, with no I/O: :func:`keyshared.core.assignment.plan_assignment` at N
members under churn, every plan checked.

Its own module because it needs neither ZooKeeper nor threads: the figures are deterministic
counts (and times), and :func:`check_assignment` is the invariant the ZooKeeper runs reuse on
the assignment they read back.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass

from keyshared.core.assignment import plan_assignment
from keyshared.core.slots import SLOT_COUNT, SlotMap

__all__ = ["PlannerFigures", "check_assignment", "fragmentation", "measure_planner"]


def check_assignment(assignment: SlotMap, live: list[str]) -> None:
    """Raise AssertionError unless every slot is owned exactly once, by a live member, and
    shares differ by at most one slot (no pins)."""
    covered = 0
    expected_lo = 0
    for slot_range, owner in assignment.items():
        assert slot_range.lo == expected_lo, f"gap or overlap at slot {expected_lo}"
        assert owner in live, f"{slot_range} owned by {owner!r}, not a live member"
        covered += slot_range.size
        expected_lo = slot_range.hi + 1
    assert covered == SLOT_COUNT and expected_lo == SLOT_COUNT, f"{covered} slots covered"
    loads = dict.fromkeys(live, 0)
    for slot_range, owner in assignment.items():
        loads[owner] += slot_range.size
    assert max(loads.values()) - min(loads.values()) <= 1, "shares differ by more than a slot"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


@dataclass
class PlannerFigures:
    members: int
    events: int
    first_plan_ms: float
    plan_ms_p50: float
    plan_ms_p99: float
    plan_ms_max: float
    ranges_per_member_mean: float  # over members and events, after each event
    ranges_per_member_max: int
    ranges_total: int  # after the last event
    moves_per_event_mean: float  # ranges changing owner: one drain each
    moves_per_event_max: int
    members_touched_per_event_mean: float  # members that lose or gain slots: each re-reads
    slots_moved_per_event_mean: float
    join_moves_mean: float
    leave_moves_mean: float
    assignment_bytes: int  # the assignment znode's JSON
    checked_plans: int


def measure_planner(
    members: int, events: int = 100, warmup: int | None = None, seed: int = 27
) -> PlannerFigures:
    """The planner at ``members`` live members: the first plan, ``warmup`` churn events (so
    fragmentation settles, default ``events``), then ``events`` measured ones; a join and a
    leave alternately, the leaver chosen at random (seeded)."""
    from coordinator.assignment import AssignmentSnapshot

    rng = random.Random(seed)
    live = [f"member-{i:05d}" for i in range(members)]
    next_id = members
    began = time.perf_counter()
    current = plan_assignment(SlotMap(), live).assignment
    first_ms = (time.perf_counter() - began) * 1000
    check_assignment(current, live)
    checked = 1
    times: list[float] = []
    per_member: list[int] = []
    moves: list[int] = []
    touched: list[int] = []
    slots_moved: list[int] = []
    joins: list[int] = []
    leaves: list[int] = []
    total = events + (events if warmup is None else warmup)
    for index in range(total):
        joining = index % 2 == 0
        if joining:
            live = [*live, f"member-{next_id:05d}"]
            next_id += 1
        else:
            victim = rng.choice(live)
            live = [m for m in live if m != victim]
        began = time.perf_counter()
        plan = plan_assignment(current, live)
        elapsed = (time.perf_counter() - began) * 1000
        current = plan.assignment
        check_assignment(current, live)
        checked += 1
        if index < total - events:
            continue
        times.append(elapsed)
        counts = [len(current.ranges_of(m)) for m in live]
        per_member.extend(counts)
        moves.append(len(plan.moves))
        (joins if joining else leaves).append(len(plan.moves))
        touched.append(len({m.target for m in plan.moves} | {m.source for m in plan.moves}))
        slots_moved.append(plan.moved_slots)
    size = len(AssignmentSnapshot(1, current, live[0], 0).to_json())
    return PlannerFigures(
        members=members,
        events=events,
        first_plan_ms=round(first_ms, 2),
        plan_ms_p50=round(_pct(times, 0.5), 2),
        plan_ms_p99=round(_pct(times, 0.99), 2),
        plan_ms_max=round(max(times, default=0.0), 2),
        ranges_per_member_mean=round(statistics.fmean(per_member), 2) if per_member else 0.0,
        ranges_per_member_max=max(per_member, default=0),
        ranges_total=len(current),
        moves_per_event_mean=round(statistics.fmean(moves), 1) if moves else 0.0,
        moves_per_event_max=max(moves, default=0),
        members_touched_per_event_mean=round(statistics.fmean(touched), 1) if touched else 0.0,
        slots_moved_per_event_mean=round(statistics.fmean(slots_moved), 1) if slots_moved else 0,
        join_moves_mean=round(statistics.fmean(joins), 1) if joins else 0.0,
        leave_moves_mean=round(statistics.fmean(leaves), 1) if leaves else 0.0,
        assignment_bytes=size,
        checked_plans=checked,
    )


def fragmentation(
    members: int, events: int, every: int, seed: int = 27
) -> list[tuple[int, int, int]]:
    """Ranges under long churn (the churn of :func:`measure_planner`): ``(events so far, ranges
    in all, most ranges of one member)`` every ``every`` events. Counts only: deterministic."""
    rng = random.Random(seed)
    live = [f"member-{i:05d}" for i in range(members)]
    next_id = members
    current = plan_assignment(SlotMap(), live).assignment
    samples: list[tuple[int, int, int]] = []
    for index in range(1, events + 1):
        if index % 2:
            live = [*live, f"member-{next_id:05d}"]
            next_id += 1
        else:
            victim = rng.choice(live)
            live = [m for m in live if m != victim]
        current = plan_assignment(current, live).assignment
        if index % every == 0:
            most = max(len(current.ranges_of(m)) for m in live)
            samples.append((index, len(current), most))
    return samples
