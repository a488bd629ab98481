"""Tests for the space-saving sketch: examples and its two guarantees as properties."""

from __future__ import annotations

import doctest
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshared.core import hotkeys as hotkeys_module
from keyshared.core.hotkeys import SpaceSaving


def test_exact_while_under_capacity() -> None:
    sketch = SpaceSaving(capacity=4)
    for key in [b"a", b"b", b"a", b"c", b"a", b"b"]:
        sketch.add(key)
    assert sketch.top(10) == [(b"a", 3.0, 0.0), (b"b", 2.0, 0.0), (b"c", 1.0, 0.0)]
    assert sketch.total == 6.0
    assert len(sketch) == 3
    assert sketch.share_of_top() == pytest.approx(0.5)


def test_eviction_records_the_error_bound() -> None:
    sketch = SpaceSaving(capacity=2)
    for key in [b"a", b"a", b"b", b"c"]:
        sketch.add(key)
    assert len(sketch) == 2
    assert sketch.top(2) == [(b"a", 2.0, 0.0), (b"c", 2.0, 1.0)]


def test_weights_find_the_slowest_keys() -> None:
    sketch = SpaceSaving(capacity=8)
    for index in range(100):
        sketch.add(f"fast-{index % 20}".encode(), 0.001)
        if index % 10 == 0:
            sketch.add(b"slow", 2.5)
    key, seconds, _ = sketch.top(1)[0]
    assert key == b"slow"
    assert seconds >= 25.0
    assert sketch.share_of_top() > 0.9


def test_empty_and_clear() -> None:
    sketch = SpaceSaving()
    assert sketch.capacity == 64
    assert sketch.top(5) == []
    assert sketch.share_of_top() == 0.0
    sketch.add(b"x", 0.0)
    assert sketch.share_of_top() == 0.0
    sketch.add(b"x")
    sketch.clear()
    assert sketch.total == 0.0 and len(sketch) == 0 and sketch.top(3) == []
    assert sketch.top(-1) == []


@pytest.mark.parametrize("capacity", [0, -3, True, 2.0])
def test_rejects_bad_capacity(capacity: object) -> None:
    with pytest.raises(ValueError, match="capacity"):
        SpaceSaving(capacity)  # type: ignore[arg-type]


@pytest.mark.parametrize("weight", [-1.0, float("nan"), float("inf")])
def test_rejects_bad_weights(weight: float) -> None:
    with pytest.raises(ValueError, match="weight"):
        SpaceSaving().add(b"k", weight)


def _check_guarantees(sketch: SpaceSaving, truth: Counter[bytes] | dict[bytes, float]) -> None:
    total = sum(truth.values())
    assert sketch.total == pytest.approx(total)
    tracked = {key: (count, error) for key, count, error in sketch.top(sketch.capacity)}
    assert len(tracked) <= sketch.capacity
    for key, (count, error) in tracked.items():
        true = truth.get(key, 0)
        # Never underestimates; overestimates by at most the recorded error.
        assert true - 1e-9 <= count <= true + error + 1e-9
        assert error <= total / sketch.capacity + 1e-9
    for key, true in truth.items():
        if true > total / sketch.capacity:
            assert key in tracked, (key, true, total)


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.integers(min_value=1, max_value=16),
    stream=st.lists(st.integers(min_value=0, max_value=40), max_size=400),
)
def test_space_saving_guarantees_unit_weights(capacity: int, stream: list[int]) -> None:
    sketch = SpaceSaving(capacity)
    truth: Counter[bytes] = Counter()
    for item in stream:
        key = str(item).encode()
        sketch.add(key)
        truth[key] += 1
    _check_guarantees(sketch, truth)


@settings(max_examples=100, deadline=None)
@given(
    capacity=st.integers(min_value=1, max_value=12),
    stream=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=30),
            st.floats(min_value=0.0, max_value=50.0),
        ),
        max_size=300,
    ),
)
def test_space_saving_guarantees_weighted(capacity: int, stream: list[tuple[int, float]]) -> None:
    sketch = SpaceSaving(capacity)
    truth: dict[bytes, float] = {}
    for item, weight in stream:
        key = str(item).encode()
        sketch.add(key, weight)
        truth[key] = truth.get(key, 0.0) + weight
    _check_guarantees(sketch, truth)


def test_finds_the_hot_key_in_a_long_skewed_stream() -> None:
    rng = random.Random(5)
    sketch = SpaceSaving(capacity=32)
    truth: Counter[bytes] = Counter()
    for _ in range(50_000):
        key = b"hot" if rng.random() < 0.2 else f"cold-{rng.randrange(100_000)}".encode()
        sketch.add(key)
        truth[key] += 1
    assert sketch.top(1)[0][0] == b"hot"
    assert sketch.share_of_top() == pytest.approx(0.2, abs=0.03)
    _check_guarantees(sketch, truth)


def test_docstring_examples_run() -> None:
    results = doctest.testmod(hotkeys_module)
    assert results.attempted > 0 and results.failed == 0
