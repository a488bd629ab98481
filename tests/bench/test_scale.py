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

from keyshared.bench.scale import (
    check_assignment,
    fragmentation,
    measure_planner,
    measure_zookeeper,
)
from keyshared.core.assignment import plan_assignment
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


@pytest.mark.timeout(120)
def test_zookeeper_measurement_at_the_smallest_scale(zookeeper_hosts: str) -> None:
    """Three members, four partitions, one join and one leave, on the session's ZooKeeper."""
    figures = measure_zookeeper(zookeeper_hosts, 3, partitions=4, events=2, steady_s=2.0)
    assert figures.members == 3 and figures.reread_all
    # at rest: every slot once (checked inside), one lease and four cursors per range
    assert figures.held_leases == figures.ranges >= 3
    assert figures.znodes_group["leases"] == figures.ranges
    assert figures.znodes_group["cursor_znodes"] == figures.ranges * 4 == figures.full_read_cursors
    assert figures.znodes_group["members"] == 3 and figures.znodes_group["leader"] == 3
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
