"""Steady-state throughput: the middle 90 % of completions, and how every contender reports it.

A wrong window would make every steady-state ratio of ``keyshared bench`` meaningless while
still printing plausible numbers, and the whole point of the figure is that a contender's
start-up and tail do not move it: both are pinned here, broker-less.
"""

from __future__ import annotations

import json
import random
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from keyshared.bench.contenders import Tally
from keyshared.bench.guard import Check, GuardCase, best
from keyshared.bench.peers.common import PeerRunError, parse_timing, timing_line
from keyshared.bench.report import paired_ratios, print_result
from keyshared.bench.result import Measurement, ScenarioResult, steady_name, timed
from keyshared.bench.shaped import SUMMARISED, summarise
from keyshared.bench.steady import MARKS, TRIM, mark_every, steady_state


def _even(records: int, seconds: float, every: int = 1) -> list[float]:
    """Marks of a run that finishes ``records`` evenly over ``seconds``."""
    return [seconds * k * every / records for k in range(1, records // every + 1)]


def _ramped(records: int, rate: float, startup: float, tail: float) -> list[float]:
    """Marks (one per record) of a run at ``rate`` that finished its first 2 % only after
    ``startup`` seconds and its last 2 % ``tail`` seconds late: a slow start and a long tail."""
    marks, now, edge = [], 0.0, records // 50
    for k in range(1, records + 1):
        now += 1 / rate
        if k == edge:
            now += startup
        if k == records - edge:
            now += tail
        marks.append(now)
    return marks


@given(
    records=st.integers(100, 20_000),
    every=st.integers(1, 40),
    seconds=st.floats(0.01, 1_000, allow_nan=False),
)
def test_an_even_run_has_its_whole_rate_as_steady_state(
    records: int, every: int, seconds: float
) -> None:
    marks = _even(records, seconds, every)
    steady = steady_state(marks, every)
    if len(marks) < 4:  # too few marks to leave a window inside 5-95 %
        return
    assert steady is not None
    assert steady.rate == pytest.approx(records / seconds, rel=1e-6)
    assert steady.records % every == 0
    total = len(marks) * every
    assert (1 - 2 * TRIM) * total - 2 * every <= steady.records <= (1 - 2 * TRIM) * total + 1e-6
    assert marks[0] <= steady.start < steady.end <= marks[-1]


@given(
    records=st.integers(1_000, 10_000),
    startup=st.floats(0, 30),
    tail=st.floats(0, 30),
)
def test_startup_and_tail_inside_the_trim_do_not_move_steady_state(
    records: int, startup: float, tail: float
) -> None:
    rate = 12_000.0
    steady = steady_state(_ramped(records, rate, startup, tail), 1)
    assert steady is not None and steady.rate == pytest.approx(rate, rel=1e-6)
    whole = records / _ramped(records, rate, startup, tail)[-1]
    assert whole <= steady.rate * (1 + 1e-9)  # the whole run pays for them, steady state not


@given(st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=300), st.randoms())
def test_steady_state_ignores_the_order_marks_were_stamped_in(
    marks: list[float], rng: random.Random
) -> None:
    shuffled = list(marks)
    rng.shuffle(shuffled)
    assert steady_state(shuffled, 3) == steady_state(marks, 3)


def test_too_few_or_simultaneous_marks_have_no_steady_state_and_bad_input_is_named() -> None:
    assert steady_state([], 1) is None
    assert steady_state([1.0, 2.0], 1) is None  # window would hold nothing
    assert steady_state([1.0] * 100, 1) is None  # all at once: no span
    with pytest.raises(ValueError, match=r"every >= 1"):
        steady_state([1.0], 0)
    with pytest.raises(ValueError, match=r"trim < 0\.5"):
        steady_state([1.0], 1, trim=0.5)


def test_mark_every_keeps_about_marks_per_run() -> None:
    assert mark_every(1) == 1 and mark_every(MARKS) == 1
    assert mark_every(80_000) == 80 and 80_000 // mark_every(80_000) == MARKS


def test_tally_marks_every_nth_completion_and_a_batch_passes_several() -> None:
    tally = Tally(30_000)
    tally.start()
    for _ in range(60):
        tally.finish(500)
    marks = tally.marks()
    assert tally.every == 30 and len(marks) == 1_000
    assert marks == sorted(marks) and marks[0] >= 0
    measured = tally.measurement("keyshared")
    assert measured.records == 30_000 and measured.steady_records > 0


def test_tally_marks_from_many_threads_count_every_record() -> None:
    tally = Tally(4_000)
    tally.start()

    def work() -> None:
        for _ in range(500):
            tally.finish()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tally.done.is_set() and len(tally.marks()) == 4_000 // tally.every


def test_timed_measurement_carries_both_figures_and_the_window() -> None:
    m = timed("pc", 1_000, 2.0, _ramped(1_000, 1_000.0, 0.5, 0.4), 1, version="0.5")
    assert m.figure == pytest.approx(1_000 / 2.0)
    assert m.steady_figure == pytest.approx(1_000.0)
    start, end = m.extra["steady_window_s"]
    assert start > 0.5 and end < 2.0 and m.extra["version"] == "0.5"
    data = json.loads(json.dumps(m.to_json()))
    assert data["figure"] == 500.0 and data["steady_figure"] == 1_000.0
    assert timed("x", 10, 1.0, [], 1).steady_figure is None  # no marks: no steady figure
    bound = Measurement("bound W/L", kind="bound", value=12_800.0)
    assert bound.steady_figure == 12_800.0  # a limit holds at every instant


def test_timing_line_round_trips_and_parse_refuses_impossible_marks() -> None:
    line = timing_line(6, 0.5, 2, [0.1, 0.2, 0.3])
    timing = parse_timing("peer", 0, f"noise\n{line}\n", "")
    assert (timing.records, timing.every, timing.marks) == (6, 2, (0.1, 0.2, 0.3))
    assert "steady_window_s" in timing.measurement("peer").extra
    few = parse_timing("peer", 0, timing_line(6, 0.5, 3, [0.1, 0.2]), "")
    assert few.measurement("peer", mode="x").extra == {"mode": "x"}  # 2 marks: no window
    old = parse_timing("peer", 0, '{"records": 6, "seconds": 0.5}', "")  # no marks: whole only
    assert old.marks == () and old.measurement("peer").steady_figure is None
    with pytest.raises(PeerRunError, match="impossible result"):
        parse_timing("peer", 0, timing_line(6, 0.5, 4, [0.1, 0.2]), "")  # 8 marked of 6
    with pytest.raises(PeerRunError, match="unreadable result"):
        parse_timing("peer", 0, '{"records": 6, "seconds": 0.5, "marks": 3}', "")


def _pc_like() -> tuple[Measurement, Measurement, Measurement]:
    """The issue's shape of a race: keyshared even at 10,464/s; Parallel Consumer slow to start
    and with a long tail (whole run 6,000/s) but 12,000/s once warm; the W/L bound."""
    ks = timed("keyshared", 80_000, 80_000 / 10_464, _even(80_000, 80_000 / 10_464, 80), 80)
    pc_marks = _ramped(80_000, 12_000.0, 2.5, 3.4)
    pc = timed("pc", 80_000, pc_marks[-1], pc_marks[79::80], 80)
    bound = Measurement("bound W/L (nominal L)", kind="bound", value=12_800.0)
    return ks, pc, bound


def test_ratios_both_ways_steady_state_first() -> None:
    ks, pc, bound = _pc_like()
    result = ScenarioResult("io/8", "d", {})
    result.ratios_both("keyshared_vs_parallel_consumer", ks, pc)
    result.ratios_both("keyshared_vs_bound", ks, bound)
    result.ratios_both("keyshared_vs_nothing", ks, Measurement("no marks", 10, 1.0))
    names = list(result.ratios)
    assert names[:2] == [steady_name("keyshared_vs_parallel_consumer"), names[1]]
    assert result.ratios["keyshared_vs_parallel_consumer"] > 1.5  # whole run: PC's start-up
    assert result.ratios["keyshared_vs_parallel_consumer_steady"] == pytest.approx(
        10_464 / 12_000, abs=0.01
    )
    assert result.ratios["keyshared_vs_bound_steady"] == pytest.approx(10_464 / 12_800, abs=0.01)
    assert "keyshared_vs_nothing_steady" not in result.ratios
    assert paired_ratios(result.ratios)["keyshared_vs_nothing"] == (None, pytest.approx(1046.4))
    console = Console(record=True, width=200)
    for measurement in (ks, pc, bound):
        result.add(measurement)
    print_result(console, result)
    text = console.export_text()
    assert "steady state" in text and "whole run" in text
    assert text.index("steady state") < text.index("whole run")


def test_summarise_reports_the_worst_shape_both_ways() -> None:
    assert list(SUMMARISED)[:2] == ["keyshared_vs_bound_steady", "keyshared_vs_bound"]
    result = ScenarioResult("io", "io", {})
    ks, pc, _ = _pc_like()
    for shape in ("4", "8"):
        nested = result.shape(shape, shape, {})
        nested.ratios_both("keyshared_vs_parallel_consumer", ks, pc)
    summarise(result)
    assert result.ratios["worst_keyshared_vs_parallel_consumer_steady"] < 1
    assert result.ratios["worst_keyshared_vs_parallel_consumer"] > 1.5


def test_guard_holds_the_steady_state_ratio_and_reports_the_whole_run_one() -> None:
    ks, pc, _ = _pc_like()
    case = GuardCase("io", 1, [], 0, 64, 0.005, 0.95, "slower")
    check = Check(case, ks, pc)
    assert check.whole_run_ratio > 1.5 and check.ratio == pytest.approx(0.87, abs=0.01)
    assert not check.passed  # the whole-run ratio would have passed it
    line = check.describe()
    assert "steady state" in line and "ratio 0.87, floor 0.95: FAILED" in line
    assert "whole run" in line and f"ratio {check.whole_run_ratio:.2f}" in line
    assert not Check(case, Measurement("ks", 10, 1.0), pc).passed  # no marks: cannot vouch
    fastest = best([pc, ks])
    assert fastest is pc and fastest.extra["runs_steady"][0] > fastest.extra["runs_steady"][1]
