"""The planner at scale, with no I/O: :func:`keyshared.core.assignment.plan_assignment` at N
members under churn, every plan checked.

Its own module because it needs neither ZooKeeper nor threads: the figures are deterministic
counts (and times), and :func:`check_assignment` is the invariant the ZooKeeper runs reuse on
the assignment they read back. Any planner with ``plan_assignment``'s signature can be measured
(:func:`load_planner`: the one of another commit, for a before/after in one sitting).
"""

from __future__ import annotations

import gc
import importlib.util
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keyshared.core.assignment import Plan, plan_assignment, share_bounds
from keyshared.core.slots import SLOT_COUNT, SlotMap

__all__ = [
    "PlannerFigures",
    "check_assignment",
    "fragmentation",
    "load_planner",
    "measure_planner",
    "planner_table",
]

Planner = Callable[[SlotMap, Iterable[str]], Any]  # plan_assignment without pins


def load_planner(path: Path) -> Planner:
    """``plan_assignment`` of the module at ``path`` (e.g. ``git show
    main:keyshared/core/assignment.py > old.py``), to measure it with the same code."""
    spec = importlib.util.spec_from_file_location("keyshared_bench_planner", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"--planner-module: {path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    planner: Planner = module.plan_assignment
    return planner


def check_assignment(assignment: SlotMap, live: list[str]) -> None:
    """Raise AssertionError unless every slot is owned exactly once, by a live member, and
    every share is within the planner's tolerance (no pins; exact balance passes too)."""
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
    for member, (least, most) in share_bounds(live).items():
        assert least <= loads[member] <= most, f"{member} holds {loads[member]} slots"


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
    touched_join_max: int  # the joiner included
    touched_join_mean: float
    touched_leave_max: int  # the leaver included
    touched_leave_mean: float
    slots_moved_per_event_mean: float
    moved_share_max: float  # slots moved per event over 65,536 / N (N before the event)
    moved_share_mean: float
    load_max_over_fair: float  # the most loaded member's slots over 65,536 / N: the hot-key cost
    load_min_over_fair: float
    ranges_per_member_max_final: int  # after the last event
    join_moves_mean: float
    leave_moves_mean: float
    assignment_bytes: int  # the assignment znode's JSON
    checked_plans: int


def measure_planner(
    members: int,
    events: int = 100,
    warmup: int | None = None,
    seed: int = 27,
    planner: Planner = plan_assignment,
) -> PlannerFigures:
    """The planner at ``members`` live members: the first plan, ``warmup`` churn events (so
    fragmentation settles, default ``events``), then ``events`` measured ones; a join and a
    leave alternately, the leaver chosen at random (seeded)."""
    from coordinator.assignment import AssignmentSnapshot

    rng = random.Random(seed)
    live = [f"member-{i:05d}" for i in range(members)]
    next_id = members
    began = time.perf_counter()
    current = planner(SlotMap(), live).assignment
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
    touched_joins: list[int] = []
    touched_leaves: list[int] = []
    shares: list[float] = []
    spread: list[float] = []
    total = events + (events if warmup is None else warmup)
    for index in range(total):
        joining = index % 2 == 0
        group = len(live)
        if joining:
            live = [*live, f"member-{next_id:05d}"]
            next_id += 1
        else:
            victim = rng.choice(live)
            live = [m for m in live if m != victim]
        # The bench's own garbage (the checks, the figures) would otherwise be collected
        # inside a timed plan: a full collection there was the whole p99 (51 ms against 22 ms
        # at 1,000 members). Collected before, a plan pays only for the garbage it makes.
        gc.collect()
        began = time.perf_counter()
        plan: Plan = planner(current, live)
        elapsed = (time.perf_counter() - began) * 1000
        current = plan.assignment
        check_assignment(current, live)
        checked += 1
        if index < total - events:
            continue
        times.append(elapsed)
        counts = list(_ranges_per_member(current, live).values())
        per_member.extend(counts)
        moves.append(len(plan.moves))
        (joins if joining else leaves).append(len(plan.moves))
        touched.append(len({m.target for m in plan.moves} | {m.source for m in plan.moves}))
        (touched_joins if joining else touched_leaves).append(touched[-1])
        slots_moved.append(plan.moved_slots)
        shares.append(plan.moved_slots * group / SLOT_COUNT)
        loads = dict.fromkeys(live, 0)
        for slot_range, owner in current.items():
            loads[owner] += slot_range.size
        spread += [v * len(live) / SLOT_COUNT for v in (max(loads.values()), min(loads.values()))]
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
        touched_join_max=max(touched_joins, default=0),
        touched_join_mean=_mean(touched_joins),
        touched_leave_max=max(touched_leaves, default=0),
        touched_leave_mean=_mean(touched_leaves),
        slots_moved_per_event_mean=round(statistics.fmean(slots_moved), 1) if slots_moved else 0,
        moved_share_max=round(max(shares, default=0.0), 3),
        moved_share_mean=round(statistics.fmean(shares), 3) if shares else 0.0,
        load_max_over_fair=round(max(spread, default=0.0), 3),
        load_min_over_fair=round(min(spread, default=0.0), 3),
        ranges_per_member_max_final=max(_ranges_per_member(current, live).values()),
        join_moves_mean=round(statistics.fmean(joins), 1) if joins else 0.0,
        leave_moves_mean=round(statistics.fmean(leaves), 1) if leaves else 0.0,
        assignment_bytes=size,
        checked_plans=checked,
    )


def _ranges_per_member(assignment: SlotMap, live: list[str]) -> dict[str, int]:
    """One pass over the map (``ranges_of`` per member is a pass each: N x R at 1,000)."""
    counts = dict.fromkeys(live, 0)
    for _, owner in assignment.items():
        counts[owner] += 1
    return counts


def _mean(values: list[int]) -> float:
    return round(statistics.fmean(values), 1) if values else 0.0


def planner_table(figures: list[PlannerFigures]) -> str:
    """The scale issue's planner rows, one column per member count (markdown)."""
    head = "| figure | " + " | ".join(f"{f.members} members" for f in figures) + " |"
    rows = [
        head,
        "|---|" + "---|" * len(figures),
        "| members touched per join (max / mean) | "
        + " | ".join(f"{f.touched_join_max} / {f.touched_join_mean}" for f in figures)
        + " |",
        "| members touched per leave (max / mean) | "
        + " | ".join(f"{f.touched_leave_max} / {f.touched_leave_mean}" for f in figures)
        + " |",
        "| keyspace moved per event, x 1/N (max / mean) | "
        + " | ".join(f"{f.moved_share_max} / {f.moved_share_mean}" for f in figures)
        + " |",
        "| ranges per member, max (measured events / final) | "
        + " | ".join(
            f"{f.ranges_per_member_max} / {f.ranges_per_member_max_final}" for f in figures
        )
        + " |",
        "| ranges in all (final) | " + " | ".join(str(f.ranges_total) for f in figures) + " |",
        "| most / least loaded member, x fair share | "
        + " | ".join(f"{f.load_max_over_fair} / {f.load_min_over_fair}" for f in figures)
        + " |",
        "| plan time p50 / p99 | "
        + " | ".join(f"{f.plan_ms_p50} / {f.plan_ms_p99} ms" for f in figures)
        + " |",
    ]
    return "\n".join(rows)


def fragmentation(
    members: int, events: int, every: int, seed: int = 27, planner: Planner = plan_assignment
) -> list[tuple[int, int, int]]:
    """Ranges under long churn (the churn of :func:`measure_planner`): ``(events so far, ranges
    in all, most ranges of one member)`` every ``every`` events. Counts only: deterministic."""
    rng = random.Random(seed)
    live = [f"member-{i:05d}" for i in range(members)]
    next_id = members
    current = planner(SlotMap(), live).assignment
    samples: list[tuple[int, int, int]] = []
    for index in range(1, events + 1):
        if index % 2:
            live = [*live, f"member-{next_id:05d}"]
            next_id += 1
        else:
            victim = rng.choice(live)
            live = [m for m in live if m != victim]
        current = planner(current, live).assignment
        if index % every == 0:
            most = max(_ranges_per_member(current, live).values())
            samples.append((index, len(current), most))
    return samples
