"""The benchmark's pure parts, without a broker: shapes, bounds, journals, /proc parsing,
goals, shaped results and their report (issue 23's shapes, ``stuck`` and the guard).

A wrong bound or a shuffle that is not one would make every ratio of ``keyshared bench io``
meaningless while still printing plausible numbers, so they are pinned here.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from keyshared.bench.bounds import order_bound
from keyshared.bench.cli_contender import cli_command
from keyshared.bench.guard import RUNS, Check, GuardCase, best, guard_cases
from keyshared.bench.journal import parse_journal, read_journal, redo
from keyshared.bench.procfs import parse_status, read_memory
from keyshared.bench.report import print_result, write_chart
from keyshared.bench.result import Measurement, ScenarioResult, timed
from keyshared.bench.shaped import summarise
from keyshared.bench.shapes import (
    DEFAULT_SHAPES,
    KEYS,
    ZIPF,
    Shape,
    interleaved_keys,
    parse_shapes,
    shape_keys,
    shape_records,
)
from keyshared.bench.workload import random_keys


def test_parse_shapes_keeps_order_drops_duplicates_and_names_bad_items() -> None:
    assert [s.name for s in parse_shapes("32, 8,zipf,8,ZIPF")] == ["32", "8", ZIPF]
    assert parse_shapes("zipf")[0].is_zipf
    assert parse_shapes("08")[0] == Shape("8", 8)
    assert [s.name for s in parse_shapes(",".join(DEFAULT_SHAPES))] == list(DEFAULT_SHAPES)
    for bad in ("0", "-4", "eight", "4,,x"):
        with pytest.raises(ValueError, match="neither a number"):
            parse_shapes(bad)
    with pytest.raises(ValueError, match="no shape"):
        parse_shapes(" , ")


def test_shape_sizes_full_quick_and_override() -> None:
    eight, zipf = Shape("8", 8), Shape(ZIPF, None)
    assert shape_records(eight, quick=False) == 8 * KEYS
    assert shape_records(eight, quick=True) < shape_records(eight, quick=False)
    assert shape_records(eight, quick=False, records=2_405) == 2_400  # whole keys only
    assert shape_records(eight, quick=False, records=3) == 8  # at least one key
    assert shape_records(zipf, quick=False) == 20_000
    assert shape_records(zipf, quick=True, records=777) == 777


def test_interleaved_keys_exact_counts_random_order_seeded() -> None:
    keys = interleaved_keys(8, 300)
    assert len(keys) == 2_400
    assert set(Counter(keys).values()) == {8}
    assert keys == interleaved_keys(8, 300)  # seeded: the same topic every run
    assert keys != interleaved_keys(8, 300, seed=1)
    round_robin = [k for _ in range(8) for k in sorted(set(keys))]
    assert keys != round_robin and keys != sorted(keys)
    # shuffled, not blocked: a key's 8 records are spread over the topic
    first = [i for i, k in enumerate(keys) if k == keys[0]]
    assert first[-1] - first[0] > 300


def test_shape_keys_zipf_is_skewed_over_10k_keys() -> None:
    keys = shape_keys(Shape(ZIPF, None), 20_000)
    counts = Counter(keys)
    assert len(keys) == 20_000 and len(counts) > 2_000
    hottest = counts.most_common(1)[0][1]
    assert 0.10 < hottest / len(keys) < 0.20  # s = 1.1: the hottest key holds ~15%
    assert shape_keys(Shape("4", 4), 1_000) == interleaved_keys(4, 250)


def test_order_bound_uniform_is_w_over_l_and_zipf_is_the_hot_key() -> None:
    uniform = order_bound(interleaved_keys(8, 10_000), 64, 0.005)
    assert uniform.rate == pytest.approx(64 / 0.005)
    assert not uniform.hot_key_bound and uniform.hottest_key_records == 8
    keys = [b"hot"] * 300 + [b"k%d" % i for i in range(700)]
    skewed = order_bound(keys, 64, 0.005)
    assert skewed.hot_key_bound
    assert skewed.seconds == pytest.approx(300 * 0.005)
    assert skewed.rate == pytest.approx(1_000 / 1.5)
    assert skewed.width_seconds == pytest.approx(1_000 * 0.005 / 64)
    with pytest.raises(ValueError, match="handler_s > 0"):
        order_bound(keys, 64, 0.0)
    with pytest.raises(ValueError):
        order_bound([], 64, 0.005)


def test_random_keys_are_uniform_and_seeded() -> None:
    keys = random_keys(20_000, 100)
    assert keys == random_keys(20_000, 100)
    counts = Counter(keys)
    assert len(counts) == 100 and max(counts.values()) < 2 * min(counts.values())


def test_journal_parsing_ignores_a_torn_last_line(tmp_path: Path) -> None:
    assert parse_journal(["0 1\n", "0 2\n", "1 7\n", "0 1"]) == [(0, 1), (0, 2), (1, 7), (0, 1)]
    assert parse_journal(["0 3\n", "0 "]) == [(0, 3)]
    path = tmp_path / "journal"
    assert read_journal(path) == []
    path.write_text("0 5\n0 6\n0")
    assert read_journal(path) == [(0, 5), (0, 6)]


def test_redo_counts_distinct_records_run_again() -> None:
    before = [(0, 1), (0, 2), (0, 3), (0, 3)]
    again = redo(before, [(0, 0), (0, 2), (0, 2), (0, 4)])
    assert (again.finished_before, again.redone) == (3, 1)
    assert again.fraction == pytest.approx(1 / 3)
    assert redo([], [(0, 1)]).fraction == 0.0


def test_parse_status_reads_kb_fields_in_bytes() -> None:
    text = "Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t3\n"
    assert parse_status(text) == {"VmHWM": 2048 * 1024, "VmRSS": 1024 * 1024}
    mine = read_memory(__import__("os").getpid())
    assert 0 < mine.rss <= mine.peak


def test_goal_met_both_directions_and_json() -> None:
    result = ScenarioResult("stuck", "d", {})
    assert result.goal("fraction", 0.995, 0.99, at_least=True).met
    assert not result.goal("rss", 70.0, 64.0, at_least=False, unit="MiB").met
    assert result.goal("redo", 0.0, 0.01, at_least=False).met
    data = result.to_json()["goals"]
    assert data["rss"] == {"value": 70.0, "goal": "<= 64", "unit": "MiB", "met": False}


def _shaped() -> ScenarioResult:
    result = ScenarioResult("io", "io", {})
    for shape, ks, pool in (("4", 0.95, 1.0), ("8", 0.60, 0.62), (ZIPF, 0.93, 0.15)):
        nested = result.shape(shape, f"shape {shape}", {"records": 10})
        nested.add(Measurement("bound", kind="bound", value=100.0))
        nested.add(Measurement("keyshared", 10, 10 / (100 * ks)))
        nested.ratio("keyshared_vs_bound", ks, 1.0)
        nested.ratio("keyshared_vs_thread_pool", pool, 1.0)
    summarise(result)
    return result


def test_summarise_reports_the_worst_shape_but_not_zipf_against_the_pool() -> None:
    result = _shaped()
    assert result.ratios["worst_keyshared_vs_bound"] == 0.6
    assert result.ratios["worst_keyshared_vs_thread_pool"] == 0.62  # zipf's 0.15 left out
    assert result.shape_ratios("keyshared_vs_bound") == {"4": 0.95, "8": 0.6, ZIPF: 0.93}
    data = json.loads(json.dumps(result.to_json()))
    assert set(data["shapes"]) == {"4", "8", ZIPF}
    assert data["shapes"]["8"]["ratios"]["keyshared_vs_bound"] == 0.6
    assert data["shapes"][ZIPF]["scenario"] == "io/zipf"


def test_report_prints_every_shape_and_draws_one_panel_each(tmp_path: Path) -> None:
    result = _shaped()
    console = Console(record=True, width=160)
    print_result(console, result)
    text = console.export_text()
    assert "io/zipf" in text and "ratios per shape" in text and "worst_keyshared_vs_bound" in text
    assert write_chart(tmp_path, result).stat().st_size > 1000


def test_cli_contender_command_runs_keyshared_run_from_the_beginning() -> None:
    command = cli_command("b:1", "t", "g", 64, extra=("-X", "session.timeout.ms=6000"))
    assert command[3:5] == ["run", "keyshared.bench.cli_handler:handle"]
    assert "auto.offset.reset=earliest" in command
    assert command[command.index("--workers") + 1] == "64"
    assert command[-2:] == ["-X", "session.timeout.ms=6000"]


def _even(label: str, records: int, seconds: float) -> Measurement:
    """A run that finished its records evenly: steady state and whole run alike."""
    return timed(label, records, seconds, [seconds * k / records for k in range(1, records + 1)], 1)


def test_guard_check_describes_the_comparison_and_the_failure() -> None:
    io = next(case for case in guard_cases() if case.name == "io")
    assert io.floor == 0.6 and len(io.keys) == 2_400 and set(Counter(io.keys).values()) == {8}
    runs = [_even("keyshared", 100, 1.0), _even("keyshared", 100, 0.5)]
    fastest = best(runs)
    assert fastest.figure == 200 and fastest.extra["runs"] == [100, 200]
    case = GuardCase("io", 1, [], 0, 64, 0.005, 0.7, "the window got slower")
    ok = Check(case, _even("keyshared", 100, 1.0), _even("pool", 100, 1.2))
    assert ok.passed and ok.ratio == pytest.approx(1.2)
    bad = Check(case, _even("keyshared", 100, 2.0), _even("pool", 100, 1.0), 2)
    assert not bad.passed
    line = bad.describe()
    assert f"best of {RUNS} each" in line and "ratio 0.50, floor 0.70: FAILED" in line
    assert "the window got slower" in line and "(attempt 2)" in line
