"""Batch settlement of the in-flight window: one step must equal the records one by one.

The settlement path completes a thread's finished records in one window step
(:meth:`InFlightWindow.complete_many`); per-key order and the safe cursor rest on it leaving
the window exactly as completing them one at a time would, releasing the same records in the
same order. The state machine in ``test_window_machine.py`` drives it among every other step;
this property compares the two paths side by side on twin windows.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from keyshared.core.window import Entry, InFlightWindow

KEYS: list[bytes | None] = [None, b"a", b"b", b"c"]

arrivals = st.lists(
    st.tuples(st.sampled_from(KEYS), st.integers(0, 2), st.integers(0, 2)),  # key, gap, worker
    min_size=1,
    max_size=40,
)


def _twins(
    items: list[tuple[bytes | None, int, int]], capacity: int, nulls: bool
) -> list[tuple[InFlightWindow[int], dict[int, Entry[int]]]]:
    twins = []
    for _ in range(2):
        window: InFlightWindow[int] = InFlightWindow(
            0, per_worker_capacity=capacity, null_keys_ordered=nulls
        )
        started: dict[int, Entry[int]] = {}
        offset = 0
        for key, gap, worker in items:
            offset += gap
            entry = window.admit(offset, key, worker, offset, 0.0)
            if entry is not None:
                started[offset] = entry
            offset += 1
        twins.append((window, started))
    return twins


def _state(window: InFlightWindow[int]) -> tuple[object, ...]:
    return (
        window.safe_cursor,
        window.finished_above_cursor().runs,
        window.size,
        window.in_flight,
        window.waiting,
        window.busy_keys,
        [window.worker_load(worker) for worker in range(3)],
    )


@settings(max_examples=300, deadline=None)
@given(
    items=arrivals,
    capacity=st.integers(1, 3),
    nulls=st.booleans(),
    data=st.data(),
)
def test_complete_many_equals_one_by_one(
    items: list[tuple[bytes | None, int, int]], capacity: int, nulls: bool, data: st.DataObject
) -> None:
    (one, one_started), (many, many_started) = _twins(items, capacity, nulls)
    assert _state(one) == _state(many)
    rounds = 0
    while one_started and rounds < 10:
        rounds += 1
        batch = data.draw(
            st.lists(st.sampled_from(sorted(one_started)), min_size=1, unique=True),
            label="batch",
        )
        released_one: list[Entry[int]] = []
        for offset in batch:
            released_one.extend(one.complete(one_started.pop(offset)))
        released_many: list[Entry[int]] = []
        refused: list[Entry[int]] = []
        many.complete_many([many_started.pop(offset) for offset in batch], released_many, refused)
        assert not refused
        assert [e.offset for e in released_one] == [e.offset for e in released_many]
        assert _state(one) == _state(many)
        one_started.update((e.offset, e) for e in released_one)
        many_started.update((e.offset, e) for e in released_many)


def test_complete_many_refuses_a_record_settled_twice_and_settles_the_rest() -> None:
    window: InFlightWindow[str] = InFlightWindow(0)
    first = window.admit(0, b"k", 0, "a", 0.0)
    assert window.admit(1, b"k", 0, "b", 0.0) is None  # waits behind 0
    other = window.admit(2, b"j", 1, "c", 0.0)
    assert first is not None and other is not None
    assert [e.offset for e in window.complete(first)] == [1]
    released: list[Entry[str]] = []
    refused: list[Entry[str]] = []
    window.complete_many([first, other], released, refused)
    assert refused == [first] and released == []
    assert window.in_flight == 1 and window.safe_cursor == 1
