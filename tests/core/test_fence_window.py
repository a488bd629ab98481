"""``FenceWindow``: a second fence within the window is another live holder, a lone one is not."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from keyshared.core.fence_window import FENCE_WINDOW, FenceWindow


def test_a_lone_fence_is_not_another_holder() -> None:
    assert not FenceWindow().record(0.0)


def test_a_second_fence_within_the_window_is_another_holder() -> None:
    fences = FenceWindow()
    fences.record(10.0)
    assert fences.record(10.0 + FENCE_WINDOW - 0.001)


def test_a_fence_that_fell_out_of_the_window_is_forgotten() -> None:
    fences = FenceWindow(window=5.0)
    fences.record(0.0)
    assert not fences.record(5.0), "exactly the window apart: the first one is gone"
    assert fences.record(9.0)


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=20))
def test_a_fence_is_another_holder_exactly_when_the_one_before_is_within_the_window(
    gaps: list[float],
) -> None:
    fences = FenceWindow(window=60.0)
    now = 0.0
    previous: float | None = None
    for gap in gaps:
        now += gap
        again = fences.record(now)
        assert again == (previous is not None and now - previous < 60.0)
        previous = now
