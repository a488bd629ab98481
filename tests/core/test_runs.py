"""OffsetRuns and RunCursor: a set of offsets kept as runs behaves exactly like the set."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keyshared.core import runs as runs_module
from keyshared.core.runs import EMPTY_RUNS, OffsetRuns, RunCursor

offsets = st.sets(st.integers(0, 300), max_size=120)
runs_lists = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)), max_size=30).map(
    lambda pairs: [(start, start + length) for start, length in pairs]
)


@given(offsets)
def test_runs_are_the_set(values: set[int]) -> None:
    runs = OffsetRuns.from_offsets(values)
    assert runs == values and set(runs) == values and len(runs) == len(values)
    for probe in range(-1, 302):
        assert (probe in runs) is (probe in values)
    # normal form: sorted, disjoint, never adjacent
    for (_, end), (start, _) in zip(runs.runs, runs.runs[1:], strict=False):
        assert end < start
    assert runs.first == (min(values) if values else None)
    assert runs.last == (max(values) if values else None)


@given(runs_lists)
def test_from_runs_merges_overlapping_and_touching_runs(pairs: list[tuple[int, int]]) -> None:
    expect = {o for start, end in pairs for o in range(start, end)}
    assert OffsetRuns.from_runs(pairs) == expect
    assert OffsetRuns.from_runs(pairs).runs == OffsetRuns.from_offsets(expect).runs


@given(offsets, offsets, st.integers(-1, 302))
def test_union_and_floor(a: set[int], b: set[int], floor: int) -> None:
    ra, rb = OffsetRuns.from_offsets(a), OffsetRuns.from_offsets(b)
    assert (ra | rb) == a | b
    assert (ra | b) == a | b
    assert ra.from_floor(floor) == {o for o in a if o >= floor}
    both = ra & rb
    assert both == a & b
    assert both.runs == OffsetRuns.from_offsets(a & b).runs  # normal: no adjacent runs
    assert (ra & b) == a & b
    end = ra.run_end(floor)
    if floor in a:
        assert end > floor and all(o in a for o in range(floor, end)) and end not in a
    else:
        assert end == floor


@given(offsets, st.lists(st.integers(0, 310), max_size=60).map(sorted))
def test_run_cursor_answers_increasing_queries_like_the_set(
    values: set[int], probes: list[int]
) -> None:
    cursor = RunCursor(OffsetRuns.from_offsets(values))
    for probe in probes:
        fast_no = probe < cursor.lo
        answer = cursor.take(probe)
        assert answer is (probe in values)
        if fast_no:
            assert not answer


def test_sorted_runs_must_not_overlap() -> None:
    with pytest.raises(ValueError, match="overlaps"):
        OffsetRuns.from_sorted_runs([(0, 5), (3, 8)])
    assert OffsetRuns.from_sorted_runs([(0, 5), (5, 8)]).runs == ((0, 8),)


def test_empty_and_equality_with_plain_sets() -> None:
    assert frozenset() == EMPTY_RUNS and not EMPTY_RUNS and len(EMPTY_RUNS) == 0
    assert OffsetRuns.coerce([3, 1, 2]).runs == ((1, 4),)
    huge = OffsetRuns.from_runs([(10, 10**12)])
    assert len(huge) == 10**12 - 10 and 10**11 in huge and huge.run_count == 1


def test_docstring_examples_run() -> None:
    assert doctest.testmod(runs_module).failed == 0


@given(st.integers(0, 50), st.integers(0, 350), runs_lists)
def test_between_is_the_range_minus_the_holes(
    lo: int, hi: int, holes: list[tuple[int, int]]
) -> None:
    gone = {o for start, end in holes for o in range(start, end)}
    got = OffsetRuns.between(lo, hi, sorted(holes))
    assert got == {o for o in range(lo, hi) if o not in gone}
