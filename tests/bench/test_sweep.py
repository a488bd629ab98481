"""The latency sweep's pure parts, without a broker: its plan and sizes, the ratios it picks and
the table and chart it renders.

A size off by a factor of ten makes a point last minutes or yield no steady state, and a ratio
picked against the wrong contender would print a plausible but meaningless verdict, so both are
pinned here; the sweep itself is run by hand (docs/benchmarks.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keyshared.bench.registry import load_scenarios
from keyshared.bench.sweep_plan import (
    ASYNC_CONCURRENCY,
    CEILINGS,
    KEY_COUNTS,
    KEYSHARED_ASYNC,
    KEYSHARED_THREADS,
    LATENCIES_MS,
    MAX_RECORDS,
    MIN_RECORDS,
    PARALLEL_CONSUMER,
    PYRALLEL,
    SHARE_CONSUMER,
    Point,
    expected_rate,
    pc_concurrencies,
    records_for,
    sweep_plan,
    threads_for,
)
from keyshared.bench.sweep_report import SweepRow, markdown_table, write_sweep_chart


def test_plan_crosses_every_key_count_with_every_latency_in_run_order() -> None:
    plan = sweep_plan(quick=False)
    assert [(p.keys, p.latency_ms) for p in plan.points] == [
        (keys, latency) for keys in KEY_COUNTS for latency in LATENCIES_MS
    ]
    assert plan.seconds > sweep_plan(quick=True).seconds
    assert len({p.name for p in plan.points}) == len(plan.points)


def test_threads_grow_with_latency_and_an_unplanned_latency_is_named() -> None:
    assert [threads_for(ms) for ms in LATENCIES_MS] == [16, 64, 256, 1_000]
    assert threads_for(5.0) == 256  # the next planned latency up
    with pytest.raises(ValueError, match="250"):
        threads_for(250.0)
    with pytest.raises(ValueError, match=">= 0"):
        threads_for(-1.0)


def test_expected_rate_is_the_order_bound_below_the_cpu_ceiling() -> None:
    # 100 ms, 1,000 keys: an ordered contender has at most 1,000 keys in flight, 10,000/s.
    assert expected_rate(KEYSHARED_ASYNC, 1_000, 1_000, 0.1) == pytest.approx(10_000)
    # Ordered: 1,000 slots but 100 keys bound it; the share consumer ignores keys.
    assert expected_rate(PARALLEL_CONSUMER, 1_000, 100, 0.1) == pytest.approx(1_000)
    assert expected_rate(SHARE_CONSUMER, 1_000, 100, 0.1) == pytest.approx(10_000)
    # 0 ms: only the CPU ceiling.
    assert expected_rate(PYRALLEL, 1_000, 1_000, 0.0) == CEILINGS[PYRALLEL]
    with pytest.raises(ValueError, match="unknown sweep contender"):
        expected_rate("kafka_streams", 1, 1, 0.0)


@given(
    contender=st.sampled_from(sorted(CEILINGS)),
    concurrency=st.integers(1, 5_000),
    keys=st.integers(1, 100_000),
    handler_ms=st.sampled_from(LATENCIES_MS),
    seconds=st.floats(0.1, 60.0),
)
def test_records_last_about_the_asked_seconds_within_bounds(
    contender: str, concurrency: int, keys: int, handler_ms: float, seconds: float
) -> None:
    handler_s = handler_ms / 1000
    records = records_for(contender, concurrency, keys, handler_s, seconds)
    assert MIN_RECORDS <= records <= MAX_RECORDS
    wanted = expected_rate(contender, concurrency, keys, handler_s) * seconds
    if MIN_RECORDS < wanted < MAX_RECORDS:
        assert abs(records - wanted) <= 0.5


def test_full_sweep_points_last_seconds_not_minutes_at_their_bound() -> None:
    """The issue's worst case: 100 ms with 1,000 keys is bounded at 10,000/s; at that rate
    every run of the full sweep takes 5-15 s."""
    plan = sweep_plan(quick=False)
    for point in plan.points:
        for contender, concurrency in (
            (KEYSHARED_THREADS, point.threads),
            (KEYSHARED_ASYNC, ASYNC_CONCURRENCY),
        ):
            rate = expected_rate(contender, concurrency, point.keys, point.handler_s)
            records = records_for(contender, concurrency, point.keys, point.handler_s, 8.0)
            assert 5 <= records / rate <= 15, (point, contender)


def test_parallel_consumer_tries_the_thread_count_and_the_async_concurrency() -> None:
    assert pc_concurrencies(64) == (64, ASYNC_CONCURRENCY)
    assert pc_concurrencies(ASYNC_CONCURRENCY) == (ASYNC_CONCURRENCY,)


def _row(**rates: float | None) -> SweepRow:
    return SweepRow(Point(1_000, 10.0), dict(rates), {name: 7 for name in rates})


def test_ratios_take_keyshareds_better_mode_over_the_best_ordered_peer() -> None:
    row = _row(
        keyshared_threads=20_000.0,
        keyshared_async=25_000.0,
        parallel_consumer=10_000.0,
        pyrallel_async=2_000.0,
        share_consumer=50_000.0,
    )
    assert row.keyshared() == (KEYSHARED_ASYNC, 25_000.0)
    assert row.best_ordered_peer() == (PARALLEL_CONSUMER, 10_000.0)
    assert row.ratio_vs_best_ordered_peer() == pytest.approx(2.5)
    assert row.ratio_vs_share_consumer() == pytest.approx(0.5)


def test_ratios_skip_missing_contenders_and_are_none_without_a_baseline() -> None:
    row = _row(keyshared_threads=9_000.0, keyshared_async=None, pyrallel_async=3_000.0)
    assert row.ratio_vs_best_ordered_peer() == pytest.approx(3.0)
    assert row.ratio_vs_share_consumer() is None
    assert _row(parallel_consumer=1.0).ratio_vs_best_ordered_peer() is None
    assert _row(keyshared_threads=1.0, share_consumer=0.0).ratio_vs_share_consumer() is None


def test_the_python_pool_is_a_reference_not_a_peer() -> None:
    """keyshared's threads over a bare pool of the same threads is its own cost; the pool never
    counts as an ordered peer (it keeps no order)."""
    row = _row(keyshared_threads=12_000.0, python_thread_pool=15_000.0, parallel_consumer=30_000.0)
    assert row.ratio_threads_vs_python_pool() == pytest.approx(0.8)
    assert row.ratio_vs_best_ordered_peer() == pytest.approx(0.4)
    assert _row(keyshared_async=1.0, python_thread_pool=2.0).ratio_threads_vs_python_pool() is None


def test_markdown_table_has_a_row_per_point_with_concurrency_and_ratios() -> None:
    rows = [
        SweepRow(
            Point(1_000, 0.0),
            {KEYSHARED_THREADS: 50_000.0, PARALLEL_CONSUMER: 25_000.0, SHARE_CONSUMER: None},
            {KEYSHARED_THREADS: 16, PARALLEL_CONSUMER: 1_000},
        ),
        SweepRow(Point(10_000, 100.0), {KEYSHARED_ASYNC: 9_500.0}, {KEYSHARED_ASYNC: 1_000}),
    ]
    lines = markdown_table(rows).splitlines()
    assert len(lines) == 4
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
    assert lines[2] == "| 1,000 | 0 | 50,000 (16) | - | 25,000 (1000) | - | - | - | 2.00x | - | - |"
    assert lines[3].startswith("| 10,000 | 100 | - | 9,500 (1000) |")


def test_chart_is_written_with_missing_points(tmp_path: Path) -> None:
    rows = [
        SweepRow(Point(keys, ms), {KEYSHARED_THREADS: 1_000.0 / (ms + 1), SHARE_CONSUMER: None})
        for keys in KEY_COUNTS
        for ms in LATENCIES_MS
    ]
    path = write_sweep_chart(tmp_path / "sweep.png", rows)
    assert path.read_bytes().startswith(b"\x89PNG")


def test_sweep_is_registered_but_runs_only_when_named() -> None:
    """The full run and its CI smoke (tests/bench/test_bench.py) would take minutes more."""
    assert not load_scenarios()["sweep"].in_full_run
