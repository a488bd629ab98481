"""The scale model's measurement (keyshared/bench/scale/, docs/scaling.md) at its smallest size.

It asserts that what the measurement reports is sane — every slot owned exactly once, one
granted lease per range, a cursor per range and partition, counts that add up — never a time:
the times are for docs/scaling.md, measured by hand on a quiet machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import keyshared.core.assignment
from keyshared.bench.scale import (
    check_assignment,
    fragmentation,
    load_planner,
    measure_planner,
    measure_zookeeper,
    planner_table,
)
from keyshared.core.assignment import HIGH_SHARE, MAX_RANGES, plan_assignment
from keyshared.core.slots import SlotMap, SlotRange


def test_planner_figures_add_up() -> None:
    figures = measure_planner(10, events=20)
    assert figures.checked_plans == 1 + 20 + 20  # the first plan, warm-up and measured churn
    assert figures.ranges_total >= 10  # at least one range per member
    assert figures.ranges_per_member_mean >= 1
    assert figures.ranges_per_member_max >= figures.ranges_per_member_mean
    assert figures.moves_per_event_max >= figures.moves_per_event_mean > 0
    # a join takes about 1/N of the space, a leave hands out the leaver's share
    assert 65536 / 11 / 2 < figures.slots_moved_per_event_mean < 65536 / 9 * 2
    assert figures.assignment_bytes > 0
    # the planner's event bounds: the one joining or leaving and at most 7 more; the keyspace
    # moved at most the most share, 1.25 x ceil(65536 / N) slots (x N / 65536 here)
    assert 1 <= figures.touched_join_mean <= figures.touched_join_max <= 8
    assert 1 <= figures.touched_leave_mean <= figures.touched_leave_max <= 8
    assert 0 < figures.moved_share_mean <= figures.moved_share_max <= HIGH_SHARE * 1.001
    assert figures.ranges_per_member_max_final <= figures.ranges_per_member_max <= MAX_RANGES
    assert 0.75 * 0.999 <= figures.load_min_over_fair <= 1 <= figures.load_max_over_fair
    assert figures.load_max_over_fair <= HIGH_SHARE * 1.001


def test_another_planner_file_is_measured_through_the_same_code() -> None:
    """The before/after of docs/scaling.md: a planner loaded from a file (here the current one)
    gives the same counts as the one imported."""
    planner = load_planner(Path(keyshared.core.assignment.__file__))
    loaded, imported = measure_planner(5, events=6, planner=planner), measure_planner(5, events=6)
    assert (loaded.ranges_total, loaded.touched_join_max, loaded.moved_share_max) == (
        imported.ranges_total,
        imported.touched_join_max,
        imported.moved_share_max,
    )
    table = planner_table([loaded, imported]).splitlines()
    assert table[0] == "| figure | 5 members | 5 members |"
    assert len(table) == 9 and all(line.count("|") == 4 for line in table)


def test_fragmentation_samples_count_ranges() -> None:
    samples = fragmentation(5, events=40, every=10)
    assert [events for events, _, _ in samples] == [10, 20, 30, 40]
    for _, ranges, most in samples:
        assert ranges >= 5 and 1 <= most <= ranges
    assert samples == fragmentation(5, events=40, every=10)  # deterministic


def test_check_assignment_refuses_a_gap_a_stranger_and_an_imbalance() -> None:
    live = ["a", "b"]
    check_assignment(plan_assignment(SlotMap(), live).assignment, live)
    with pytest.raises(AssertionError):
        check_assignment(SlotMap([(SlotRange(0, 100), "a")]), live)  # gap
    with pytest.raises(AssertionError):
        check_assignment(SlotMap([(SlotRange(0, 65535), "c")]), live)  # not live
    with pytest.raises(AssertionError):
        check_assignment(SlotMap([(SlotRange(0, 1), "a"), (SlotRange(2, 65535), "b")]), live)
    # within the tolerance (0.75-1.25 of the fair share) passes; beyond it does not
    check_assignment(SlotMap([(SlotRange(0, 24575), "a"), (SlotRange(24576, 65535), "b")]), live)
    with pytest.raises(AssertionError):
        check_assignment(
            SlotMap([(SlotRange(0, 24574), "a"), (SlotRange(24575, 65535), "b")]), live
        )


@pytest.mark.timeout(120)
def test_zookeeper_measurement_at_the_smallest_scale(zookeeper_hosts: str) -> None:
    """Three members, four partitions, one join and one leave, on the session's ZooKeeper."""
    figures = measure_zookeeper(zookeeper_hosts, 3, partitions=4, events=2, steady_s=2.0)
    assert figures.members == 3 and not figures.reread_all
    # at rest: every slot once (checked inside), one lease and four cursors per range
    assert figures.held_leases == figures.ranges >= 3
    assert figures.znodes_group["leases"] == figures.ranges
    assert figures.znodes_group["cursor_znodes"] == figures.ranges * 4 == figures.full_read_cursors
    assert figures.znodes_group["members"] == 3 and figures.znodes_group["leader"] == 3
    # a member's commit interval is one cursor transaction, whatever ranges it holds
    assert figures.flush_rounds >= 1 and figures.cursor_transactions_per_member_round == 1.0
    assert [e.kind for e in figures.events] == ["join", "leave"]
    for event in figures.events:
        assert event.moves >= 1 and event.members_touched >= 1
        assert event.written_s <= event.all_seen_s <= event.settled_s
    gens = [e.generation for e in figures.events]
    assert gens == sorted(set(gens))
    if figures.znodes_total:  # the server answers mntr (the suite's own does)
        assert figures.znodes_total >= sum(figures.znodes_group.values())
        assert figures.steady_writes_per_s > 0
        assert all(e.zk_writes > 0 for e in figures.events)


@pytest.mark.timeout(120)
def test_command_line_writes_the_results(zookeeper_hosts: str, tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    command = [sys.executable, "-m", "keyshared.bench.scale", "--planner-members", "10",
               "--planner-events", "4", "--members", "2", "--partitions", "2", "--events", "0",
               "--steady-seconds", "1", "--zookeeper", zookeeper_hosts,
               "--out", str(out)]  # fmt: skip
    subprocess.run(command, check=True, timeout=100, capture_output=True)
    results = json.loads(out.read_text())
    assert [p["members"] for p in results["planner"]] == [10]
    assert [z["members"] for z in results["zookeeper"]] == [2]
    assert results["zookeeper"][0]["held_leases"] == results["zookeeper"][0]["ranges"]
