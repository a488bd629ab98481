"""Direct tests of the per-partition InFlightWindow (keyshared/core/window.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshared.core.runs import OffsetRuns
from keyshared.core.window import CursorBlocker, Entry, InFlightWindow


def offsets(entries: list[Entry[str]]) -> list[int]:
    return [e.offset for e in entries]


def started(entry: Entry[str] | None) -> Entry[str]:
    assert entry is not None, "expected the record to be dispatched at once"
    assert entry.in_flight
    return entry


# -- the docstring example ----------------------------------------------------------------------


def test_docstring_example() -> None:
    w = InFlightWindow[str](start_offset=0)
    first = w.admit(0, b"k", worker=0, payload="a", now=0.0)
    assert first is not None
    assert (first.offset, first.key, first.payload, first.in_flight) == (0, b"k", "a", True)
    assert w.admit(1, b"k", worker=0, payload="b", now=0.0) is None
    released = w.complete(0)
    assert offsets(released) == [1]
    assert released[0].payload == "b"
    assert w.safe_cursor == 1


# -- per-key order ------------------------------------------------------------------------------


def test_per_key_fifo_and_other_keys_not_held_up() -> None:
    w = InFlightWindow[str](start_offset=100)
    started(w.admit(100, b"a", 0, "a0", 0.0))
    assert w.admit(101, b"a", 0, "a1", 0.0) is None
    assert w.admit(102, b"a", 1, "a2", 0.0) is None
    # another key is dispatched at once although "a" has a backlog
    b0 = started(w.admit(103, b"b", 1, "b0", 0.0))
    assert w.admit(104, b"a", 0, "a3", 0.0) is None
    assert (w.in_flight, w.waiting, w.size, w.busy_keys) == (2, 3, 5, 2)

    assert w.complete(b0.offset) == []
    assert w.busy_keys == 1
    assert w.safe_cursor == 100  # 100 still in flight

    order: list[int] = []
    current = 100
    while True:
        released = w.complete(current)
        if not released:
            break
        assert len(released) == 1
        order.append(released[0].offset)
        current = released[0].offset
    assert order == [101, 102, 104]
    assert (w.size, w.in_flight, w.waiting, w.busy_keys) == (0, 0, 0, 0)
    assert w.safe_cursor == 105


def test_empty_key_is_an_ordered_key_distinct_from_null() -> None:
    w = InFlightWindow[str](start_offset=0)
    started(w.admit(0, b"", 0, "x", 0.0))
    assert w.admit(1, b"", 0, "y", 0.0) is None
    started(w.admit(2, None, 0, "z", 0.0))


def test_null_keys_are_unordered_by_default() -> None:
    w = InFlightWindow[str](start_offset=0)
    entries = [started(w.admit(i, None, i % 2, f"n{i}", 0.0)) for i in range(5)]
    assert not any(e.ordered for e in entries)
    assert (w.in_flight, w.waiting, w.busy_keys) == (5, 0, 0)
    # completion in any order; no release because nothing waits
    for off in (3, 0, 4, 1):
        assert w.complete(off) == []
    assert w.safe_cursor == 2
    assert w.complete(2) == []
    assert w.safe_cursor == 5


def test_null_keys_ordered_when_configured() -> None:
    w = InFlightWindow[str](start_offset=0, null_keys_ordered=True)
    first = started(w.admit(0, None, 0, "n0", 0.0))
    assert first.ordered
    assert w.admit(1, None, 1, "n1", 0.0) is None
    assert w.admit(2, None, 0, "n2", 0.0) is None
    assert w.busy_keys == 1
    assert offsets(w.complete(0)) == [1]
    assert offsets(w.complete(1)) == [2]
    assert w.complete(2) == []
    assert w.safe_cursor == 3


# -- per-worker capacity ------------------------------------------------------------------------


def test_per_worker_capacity_backlog() -> None:
    w = InFlightWindow[str](start_offset=0, per_worker_capacity=2)
    started(w.admit(0, b"a", 0, "", 0.0))
    started(w.admit(1, b"b", 0, "", 0.0))
    assert w.admit(2, b"c", 0, "", 0.0) is None  # worker 0 full
    assert w.admit(3, None, 0, "", 0.0) is None  # null keys respect capacity too
    started(w.admit(4, b"d", 1, "", 0.0))  # worker 1 unaffected
    assert w.admit(5, b"a", 0, "", 0.0) is None  # waits for its key, not in the backlog
    assert (w.worker_load(0), w.worker_load(1), w.worker_load(7)) == (2, 1, 0)
    assert (w.in_flight, w.waiting) == (3, 3)

    assert offsets(w.complete(1)) == [2]  # backlog is FIFO
    assert w.worker_load(0) == 2
    # completing "a" frees a worker slot (-> null record 3) and key "a" (-> offset 5, which
    # then has to queue for the worker because 3 took the slot)
    assert offsets(w.complete(0)) == [3]
    assert w.worker_load(0) == 2
    waiting = w.get(5)
    assert waiting is not None and not waiting.in_flight
    assert offsets(w.complete(3)) == [5]
    assert w.worker_load(0) == 2
    assert w.complete(2) == []
    assert w.complete(5) == []
    assert w.complete(4) == []
    assert (w.size, w.worker_load(0), w.worker_load(1), w.safe_cursor) == (0, 0, 0, 6)


def test_worker_full_head_of_key_keeps_the_key_busy() -> None:
    w = InFlightWindow[str](start_offset=0, per_worker_capacity=1)
    started(w.admit(0, b"x", 0, "", 0.0))
    assert w.admit(1, b"k", 0, "", 0.0) is None  # head of k, waits for worker 0
    assert w.admit(2, b"k", 1, "", 0.0) is None  # worker 1 is free, but k must keep order
    assert offsets(w.complete(0)) == [1]
    assert offsets(w.complete(1)) == [2]


# -- pause / resume -----------------------------------------------------------------------------


def test_pause_at_max_window_resume_at_low_watermark_each_signalled_once() -> None:
    w = InFlightWindow[str](start_offset=0, max_window=4, low_watermark=2)
    for i in range(3):
        w.admit(i, f"k{i}".encode(), 0, "", 0.0)
        assert not w.should_pause()
    w.admit(3, b"k3", 0, "", 0.0)
    assert w.size == 4
    assert not w.should_resume()
    assert w.should_pause()
    assert w.paused
    assert not w.should_pause()  # signalled once
    w.admit(4, b"k4", 0, "", 0.0)  # the owner may still receive fetched records
    assert not w.should_pause()
    w.complete(0)
    w.complete(1)
    assert w.size == 3
    assert not w.should_resume()  # above the low watermark: stay paused (hysteresis)
    w.complete(2)
    assert w.size == 2
    assert w.should_resume()
    assert not w.paused
    assert not w.should_resume()  # signalled once
    assert not w.should_pause()  # size 2 < 4
    w.admit(5, b"k5", 0, "", 0.0)
    w.admit(6, b"k6", 0, "", 0.0)
    assert w.should_pause()  # and the cycle repeats


def test_waiting_records_count_towards_the_window_bound() -> None:
    w = InFlightWindow[str](start_offset=0, max_window=3, low_watermark=0)
    for i in range(3):
        w.admit(i, b"same", 0, "", 0.0)
    assert (w.in_flight, w.waiting) == (1, 2)
    assert w.should_pause()
    w.complete(0)
    w.complete(1)
    assert not w.should_resume()  # 1 left, low watermark 0
    w.complete(2)
    assert w.should_resume()


def test_default_low_watermark_is_eighty_percent() -> None:
    assert InFlightWindow[str](0).low_watermark == 8_000
    assert InFlightWindow[str](0).max_window == 10_000
    assert InFlightWindow[str](0).per_worker_capacity == 1_000
    assert InFlightWindow[str](0, max_window=10).low_watermark == 8
    assert InFlightWindow[str](0, max_window=1).low_watermark == 0


def test_a_stuck_record_holds_back_only_its_key_and_finished_records_hold_no_state() -> None:
    """Issue 23: ``max_window`` bounds unfinished records only. Behind one stuck record the
    rest of the partition keeps flowing; what finished costs no entry, and the finished
    offsets above the cursor are runs (one here), not one int per record."""
    w = InFlightWindow[str](start_offset=0, max_window=100, low_watermark=50)
    stuck = w.admit(0, b"stuck", 0, "", 0.0)
    assert stuck is not None
    for offset in range(1, 100_001):
        entry = w.admit(offset, b"k%d" % (offset % 500), offset % 8, "", 0.0)
        assert entry is not None  # every other key's record starts at once
        assert w.complete(entry) == []
        assert not w.should_pause()
    assert (w.size, w.safe_cursor) == (1, 0) and w.held <= 1 + 65
    finished = w.finished_above_cursor()
    assert finished.runs == ((1, 100_001),) and len(finished) == 100_000
    w.complete(stuck)
    assert (w.size, w.safe_cursor, w.held) == (0, 100_001, 0)


def test_finished_entries_inside_the_queue_are_compacted() -> None:
    """Records that finish while an older one is still running are dropped from the window's
    queue in amortised O(1): the queue never holds many more entries than are unfinished."""
    w = InFlightWindow[str](start_offset=0, per_worker_capacity=10_000)
    stuck = w.admit(0, b"stuck", 0, "", 0.0)
    assert stuck is not None
    running = [w.admit(offset, b"k%d" % offset, 1, "", 0.0) for offset in range(1, 5_001)]
    for offset, entry in enumerate(running, start=1):
        assert entry is not None
        w.complete(entry)
        assert w.held <= 2 * w.size + 65
        if offset % 1000 == 0:
            assert w.finished_above_cursor().runs == ((1, offset + 1),)
    assert w.blocker(1.0) == (0, b"stuck", 1.0, True)


def test_pause_counts_unfinished_records_only() -> None:
    w = InFlightWindow[str](start_offset=0, max_window=2, already_done=frozenset({1, 2, 3}))
    for i in range(4):
        w.admit(i, b"k", 0, "", 0.0)
    assert (w.size, w.held) == (1, 1)
    assert not w.should_pause()
    w.admit(4, b"k", 0, "", 0.0)  # waits behind 0
    assert w.should_pause()
    w.complete(0)
    assert w.should_resume()
    assert w.safe_cursor == 4


def test_already_done_prefix_is_not_held() -> None:
    w = InFlightWindow[str](start_offset=0, max_window=2, already_done=frozenset({0, 1, 2}))
    for i in range(4):
        w.admit(i, b"k", 0, "", 0.0)
    assert (w.size, w.held) == (1, 1)
    assert not w.should_pause()


def test_given_back_records_hold_the_cursor_whatever_the_position() -> None:
    w = InFlightWindow[str](start_offset=0)
    w.admit(0, b"a", 0, "", 0.0)
    w.give_back(1)  # delivered while draining, never run
    w.complete(0)
    w.observe_position(5)
    assert w.safe_cursor == 1
    w.give_back(3)  # a later give-back never raises the ceiling
    assert w.safe_cursor == 1


def test_seen_end_is_what_the_window_can_account_for() -> None:
    """A key_shared range's cursor is written from the window only up to here (its pieces may
    know more above; see keyshared/modes/range_cursors.py)."""
    w = InFlightWindow[str](start_offset=10)
    assert w.seen_end == 10
    w.admit(10, b"a", 0, "", 0.0)
    w.admit_finished(11)
    assert w.seen_end == 12
    w.observe_position(15)  # transaction markers up to 14: seen, nothing to run
    assert w.seen_end == 15
    w.give_back(15)  # delivered while draining: not accounted for
    w.observe_position(20)
    assert w.seen_end == 15


# -- already done (restart metadata) ------------------------------------------------------------


def test_already_done_complete_on_arrival_and_never_dispatched() -> None:
    w = InFlightWindow[str](start_offset=10, already_done=frozenset({11, 12, 15}))
    started(w.admit(10, b"k", 0, "", 0.0))
    assert w.admit(11, b"k", 0, "", 0.0) is None  # done: not queued behind 10
    assert w.admit(12, b"j", 0, "", 0.0) is None
    assert w.get(11) is None and w.get(12) is None
    assert w.admit(13, b"k", 0, "", 0.0) is None  # waits behind 10
    assert (w.size, w.in_flight, w.waiting) == (2, 1, 1)
    # 15 is not read yet, but it stays finished: a commit now must not forget it
    assert list(w.finished_above_cursor()) == [11, 12, 15]
    with pytest.raises(KeyError):
        w.complete(11)
    assert offsets(w.complete(10)) == [13]
    assert w.safe_cursor == 13
    assert list(w.finished_above_cursor()) == [15]
    assert w.complete(13) == []
    assert w.safe_cursor == 14
    assert list(w.finished_above_cursor()) == [15]
    # an already-done offset as the lowest pending one moves the cursor straight past it
    assert w.admit(15, None, 0, "", 0.0) is None
    assert w.safe_cursor == 16
    assert w.size == 0


def test_a_member_that_stops_early_carries_the_finished_offsets_it_did_not_reach() -> None:
    """Killed behind a stuck record, restarted, stopped again before reading far: the
    second commit still names what the first member finished, or a third start redoes it."""
    done = OffsetRuns.from_runs([(1, 200_001)])
    w = InFlightWindow[str](start_offset=0, already_done=done)
    stuck = w.admit(0, b"stuck", 0, "", 0.0)
    assert stuck is not None
    for offset in range(1, 1001):  # read only the first thousand before the stop
        assert w.admit(offset, b"k", 0, "", 0.0) is None
    assert w.finished_above_cursor().runs == ((1, 200_001),)
    w.complete(stuck)
    # all of 1001..200,000 was finished before: the cursor passes them (resting at 1001
    # would un-name 1001)
    assert w.safe_cursor == 200_001 and not w.finished_above_cursor()


def test_already_done_only_prefix_moves_cursor_on_arrival() -> None:
    w = InFlightWindow[str](start_offset=0, already_done=frozenset({0, 1, 2}))
    for i in range(3):
        assert w.admit(i, b"k", 0, "", 0.0) is None
    assert w.safe_cursor == 3
    assert list(w.finished_above_cursor()) == []
    assert w.blocker(1.0) is None


def test_admit_finished_filtered_records() -> None:
    w = InFlightWindow[str](start_offset=0, already_done=frozenset({3}))
    started(w.admit(0, b"k", 0, "", 0.0))
    w.admit_finished(1)  # filtered out: done on arrival, holds no key
    assert w.get(1) is None
    # 3 (already done, not read yet) is carried too
    assert (w.size, w.safe_cursor, list(w.finished_above_cursor())) == (1, 0, [1, 3])
    started(w.admit(2, b"j", 0, "", 0.0))
    w.admit_finished(3)  # also in already_done: no double bookkeeping
    w.complete(0)
    assert (w.safe_cursor, list(w.finished_above_cursor())) == (2, [3])
    w.complete(2)
    assert w.safe_cursor == 4
    w.admit_finished(6)  # on an empty window, with a gap
    assert (w.safe_cursor, w.size, w.blocker(1.0)) == (7, 0, None)
    with pytest.raises(ValueError, match="out of order"):
        w.admit_finished(6)
    with pytest.raises(ValueError, match="out of order"):
        w.admit(5, b"k", 0, "", 0.0)


# -- gaps and the safe cursor -------------------------------------------------------------------


def test_offset_gaps_and_trailing_transaction_marker() -> None:
    w = InFlightWindow[str](start_offset=0)
    for off, key in ((0, b"a"), (1, b"b"), (5, b"c"), (9, b"d")):
        started(w.admit(off, key, 0, "", 0.0))
    assert w.safe_cursor == 0
    w.complete(5)
    assert (w.safe_cursor, list(w.finished_above_cursor())) == (0, [5])
    w.complete(0)
    assert (w.safe_cursor, list(w.finished_above_cursor())) == (1, [5])
    w.complete(1)
    assert (w.safe_cursor, list(w.finished_above_cursor())) == (9, [])  # passes the gaps 2-4, 6-8
    w.complete(9)
    assert w.safe_cursor == 10
    # offset 10 is a transaction commit marker: never delivered, but the position passes it
    w.observe_position(11)
    assert w.safe_cursor == 11
    w.observe_position(7)  # a stale position is ignored
    assert w.safe_cursor == 11
    with pytest.raises(ValueError, match="out of order"):
        w.admit(10, b"a", 0, "", 0.0)
    started(w.admit(11, b"a", 0, "", 0.0))


def test_observe_position_does_not_pass_incomplete_records() -> None:
    w = InFlightWindow[str](start_offset=0)
    started(w.admit(0, b"a", 0, "", 0.0))
    started(w.admit(1, b"b", 0, "", 0.0))
    w.complete(1)
    w.observe_position(50)
    assert w.safe_cursor == 0
    w.complete(0)
    assert w.safe_cursor == 50


def test_observe_position_on_empty_window() -> None:
    w = InFlightWindow[str](start_offset=7)
    assert w.safe_cursor == 7
    w.observe_position(3)
    assert w.safe_cursor == 7  # never below start_offset
    w.observe_position(9)
    assert w.safe_cursor == 9


def test_cursor_never_moves_backwards_with_late_gap_records() -> None:
    w = InFlightWindow[str](start_offset=0)
    started(w.admit(0, b"a", 0, "", 0.0))
    w.complete(0)
    assert w.safe_cursor == 1
    started(w.admit(4, b"a", 0, "", 0.0))
    assert 1 <= w.safe_cursor <= 4
    w.complete(4)
    assert w.safe_cursor == 5


# -- blocker ------------------------------------------------------------------------------------


def test_blocker_reports_oldest_incomplete_record_and_age() -> None:
    w = InFlightWindow[str](start_offset=0, per_worker_capacity=1)
    assert w.blocker(5.0) is None
    started(w.admit(0, b"a", 0, "", 10.0))
    assert w.admit(1, b"b", 0, "", 11.0) is None  # worker full
    started(w.admit(2, None, 1, "", 12.5))
    assert w.blocker(20.0) == CursorBlocker(offset=0, key=b"a", age=10.0, in_flight=True)
    w.complete(0)  # releases 1
    assert w.blocker(20.0) == CursorBlocker(1, b"b", 9.0, True)
    w.complete(2)
    assert w.blocker(20.0) == CursorBlocker(1, b"b", 9.0, True)
    w.complete(1)
    assert w.blocker(20.0) is None


def test_blocker_follows_the_cursor() -> None:
    w = InFlightWindow[str](start_offset=0, per_worker_capacity=1)
    started(w.admit(0, b"a", 0, "", 1.0))
    assert w.admit(1, b"b", 0, "", 2.0) is None
    started(w.admit(2, b"c", 1, "", 3.0))
    w.complete(0)
    w.complete(1)
    assert w.admit(3, b"c", 1, "", 4.0) is None
    # 2 in flight, 3 waits behind it; 2 is the blocker
    assert w.blocker(6.0) == CursorBlocker(2, b"c", 3.0, True)
    started(w.admit(4, b"d", 0, "", 4.0))
    assert w.admit(5, b"e", 0, "", 4.5) is None
    w.complete(2)
    assert w.blocker(6.0) == CursorBlocker(3, b"c", 2.0, True)
    w.complete(3)
    assert w.blocker(6.0) == CursorBlocker(4, b"d", 2.0, True)
    w.complete(4)
    assert w.blocker(6.0) == CursorBlocker(5, b"e", 1.5, True)


def test_blocker_when_oldest_record_waits_for_its_worker() -> None:
    w = InFlightWindow[str](start_offset=0, per_worker_capacity=1)
    started(w.admit(0, b"k", 0, "", 1.0))
    assert w.admit(1, b"k", 0, "", 2.0) is None  # waits for key k
    assert w.admit(2, b"j", 0, "", 3.0) is None  # waits for worker 0
    # completing 0 frees worker 0 (-> 2 from the backlog) and key k (-> 1, now behind 2)
    assert offsets(w.complete(0)) == [2]
    assert w.blocker(10.0) == CursorBlocker(1, b"k", 8.0, in_flight=False)
    assert offsets(w.complete(2)) == [1]
    assert w.blocker(10.0) == CursorBlocker(1, b"k", 8.0, in_flight=True)


# -- removal ------------------------------------------------------------------------------------


def test_remove_returns_in_flight_and_waiting() -> None:
    w = InFlightWindow[str](start_offset=0, per_worker_capacity=1)
    started(w.admit(0, b"a", 0, "p0", 0.0))
    assert w.admit(1, b"a", 1, "p1", 0.0) is None  # waits for key a
    started(w.admit(2, b"b", 1, "p2", 0.0))
    assert w.admit(3, b"c", 1, "p3", 0.0) is None  # waits for worker 1
    started(w.admit(4, None, 2, "p4", 0.0))
    w.complete(4)
    drained = w.remove()
    assert offsets(drained.in_flight) == [0, 2]
    assert offsets(drained.waiting) == [1, 3]
    assert [e.payload for e in drained.in_flight + drained.waiting] == ["p0", "p2", "p1", "p3"]
    in_flight, waiting = drained  # a tuple, for unpacking
    assert in_flight is drained.in_flight and waiting is drained.waiting
    assert (w.size, w.in_flight, w.waiting, w.busy_keys, w.worker_load(1)) == (0, 0, 0, 0, 0)


def test_remove_empty_window() -> None:
    drained = InFlightWindow[str](start_offset=3).remove()
    assert drained.in_flight == [] and drained.waiting == []


# -- errors -------------------------------------------------------------------------------------


def test_admit_out_of_order_raises() -> None:
    w = InFlightWindow[str](start_offset=5)
    with pytest.raises(ValueError, match=r"offset 4 admitted out of order"):
        w.admit(4, b"k", 0, "", 0.0)  # below start_offset
    started(w.admit(5, b"k", 0, "", 0.0))
    with pytest.raises(ValueError, match=r"offset 5 admitted out of order.*up to 5"):
        w.admit(5, b"k", 0, "", 0.0)  # duplicate
    assert w.admit(8, b"k", 0, "", 0.0) is None
    with pytest.raises(ValueError, match="out of order"):
        w.admit(7, b"j", 0, "", 0.0)
    assert (w.size, w.safe_cursor) == (2, 5)


def test_complete_unknown_offset_raises() -> None:
    w = InFlightWindow[str](start_offset=0)
    started(w.admit(0, b"k", 0, "", 0.0))
    with pytest.raises(KeyError, match="offset 7 is not in flight"):
        w.complete(7)
    w.complete(0)
    with pytest.raises(KeyError, match="offset 0 is not in flight"):
        w.complete(0)  # twice
    assert (w.size, w.in_flight, w.safe_cursor) == (0, 0, 1)


def test_complete_waiting_offset_raises() -> None:
    w = InFlightWindow[str](start_offset=0)
    started(w.admit(0, b"k", 0, "", 0.0))
    assert w.admit(1, b"k", 0, "", 0.0) is None
    with pytest.raises(KeyError, match="offset 1 is not in flight"):
        w.complete(1)


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"max_window": 0}, "max_window"),
        ({"max_window": -3}, "max_window"),
        ({"per_worker_capacity": 0}, "per_worker_capacity"),
        ({"low_watermark": -1}, "low_watermark"),
        ({"max_window": 5, "low_watermark": 5}, "low_watermark"),
        ({"max_window": 5, "low_watermark": 9}, "low_watermark"),
    ],
)
def test_bad_constructor_args_name_the_option(kwargs: dict[str, int], option: str) -> None:
    with pytest.raises(ValueError, match=option):
        InFlightWindow[str](
            0,
            max_window=kwargs.get("max_window", 10_000),
            low_watermark=kwargs.get("low_watermark"),
            per_worker_capacity=kwargs.get("per_worker_capacity", 1_000),
        )


def test_edge_constructor_args_accepted() -> None:
    w = InFlightWindow[str](0, max_window=1, low_watermark=0, per_worker_capacity=1)
    started(w.admit(0, b"k", 0, "", 0.0))
    assert w.should_pause()
    w.complete(0)
    assert w.should_resume()


# -- bugs found in review (uncommitted until window.py is fixed) --------------------------------


def test_complete_of_a_waiting_offset_raises_without_losing_it() -> None:
    """The guard must not corrupt the window: the waiting record stays and is still released."""
    w = InFlightWindow[str](start_offset=0)
    started(w.admit(0, b"k", 0, "", 0.0))
    assert w.admit(1, b"k", 0, "", 0.0) is None
    with pytest.raises(KeyError, match="offset 1 is not in flight"):
        w.complete(1)
    assert (w.size, w.in_flight, w.waiting) == (2, 1, 1)
    assert w.get(1) is not None
    assert offsets(w.complete(0)) == [1]
    assert w.complete(1) == []  # today: KeyError, the record was dropped from the index
    assert (w.size, w.waiting, w.busy_keys, w.safe_cursor) == (0, 0, 0, 2)


def test_complete_of_a_backlogged_offset_raises_without_losing_it() -> None:
    w = InFlightWindow[str](start_offset=0, per_worker_capacity=1)
    started(w.admit(0, b"a", 0, "", 0.0))
    assert w.admit(1, b"b", 0, "", 0.0) is None  # waits for worker 0
    with pytest.raises(KeyError):
        w.complete(1)
    assert (w.size, w.waiting) == (2, 1)
    assert offsets(w.complete(0)) == [1]
    assert w.complete(1) == []
    assert w.safe_cursor == 2


def test_cursor_is_the_lowest_incomplete_offset_after_a_gap() -> None:
    """Issue 3: cursor = the lowest received offset not yet complete."""
    w = InFlightWindow[str](start_offset=0)
    started(w.admit(0, b"a", 0, "", 0.0))
    w.complete(0)
    assert w.safe_cursor == 1
    started(w.admit(5, b"a", 0, "", 0.0))  # 1-4 never delivered (compacted / markers)
    assert w.safe_cursor == 5  # today: 1
    assert w.blocker(0.0) is not None and w.blocker(0.0).offset == 5  # type: ignore[union-attr]


def test_cursor_on_a_window_whose_first_record_is_above_start() -> None:
    w = InFlightWindow[str](start_offset=100)
    assert w.admit(130, b"a", 0, "", 0.0) is not None
    assert w.safe_cursor == 130  # today: 100


def test_the_cursor_never_rests_on_an_offset_finished_before_the_restart() -> None:
    """The 30-minute exactly-once partition run's duplicate output: a member resumed at 120224
    with 120599 finished before the restart (its output committed); once everything it had
    read was finished, the cursor stood at the end of what it had read, 120599 itself, and the
    metadata names only offsets above the cursor, so the commit un-named 120599 and the next
    redo ran it again. The cursor passes a carried run it reaches."""
    w = InFlightWindow[str](start_offset=10, already_done=frozenset({15, 16, 20}))
    for offset in range(10, 15):
        entry = w.admit(offset, b"k%d" % offset, worker=0, payload="p", now=0.0)
        assert entry is not None
        w.complete(entry)
    assert w.safe_cursor == 17
    assert set(w.finished_above_cursor()) == {20}
    w.admit(15, b"a", worker=0, payload="p", now=0.0)  # arrives later: done, nothing moves back
    w.admit(16, b"a", worker=0, payload="p", now=0.0)
    assert w.safe_cursor == 17
    entry = w.admit(17, b"b", worker=0, payload="p", now=0.0)
    assert entry is not None and w.safe_cursor == 17


@settings(max_examples=300, deadline=None)
@given(
    done=st.sets(st.integers(0, 60), max_size=30),
    read=st.integers(0, 70),
    finish=st.sets(st.integers(0, 70)),
)
def test_a_commit_names_every_offset_finished_before_the_restart(
    done: set[int], read: int, finish: set[int]
) -> None:
    """Whatever was read and finished since, cursor and metadata together name every offset
    the restart carried: each is below the cursor or named above it, never the cursor itself
    (a commit at a carried offset un-names it)."""
    w = InFlightWindow[str](start_offset=0, max_window=1000, already_done=frozenset(done))
    entries = []
    for offset in range(read):
        entry = w.admit(offset, None, worker=offset % 3, payload="p", now=0.0)
        if entry is not None:
            entries.append(entry)
    for entry in entries:
        if entry.offset in finish:
            w.complete(entry)
    cursor = w.safe_cursor
    named = set(w.finished_above_cursor())
    assert all(o < cursor or o in named for o in done)


def test_a_give_back_at_a_carried_offset_does_not_pull_the_cursor_onto_it() -> None:
    w = InFlightWindow[str](start_offset=0, already_done=frozenset({3, 4}))
    for o in range(3):
        e = w.admit(o, b"k", 0, "p", 0.0)
        assert e is not None
        w.complete(e)
    assert w.safe_cursor == 5 and w.seen_end == 3
    w.give_back(3)  # draining batch starting at a carried offset
    assert w.safe_cursor == 5  # old code: 3 (un-naming 3)
    assert not w.finished_above_cursor()


@settings(max_examples=300, deadline=None)
@given(
    log_gaps=st.lists(st.integers(1, 3), min_size=1, max_size=40),
    done_pick=st.lists(st.booleans(), max_size=40),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["admit", "complete", "observe", "give_back"]), st.integers(0, 50)
        ),
        max_size=120,
    ),
    start_skip=st.integers(0, 2),
)
def test_no_loss_and_no_carried_offset_un_named_whatever_the_window_meets(
    log_gaps: list[int], done_pick: list[bool], ops: list[tuple[str, int]], start_skip: int
) -> None:
    """A log with gaps (markers), some records finished before the restart, and any mix of
    admits, filtered records, completions, consumer positions and give-backs: after every
    step nothing unfinished is below the cursor, the cursor never goes back nor rests on a
    carried offset, every carried offset is below it or named, and a given-back record that
    is not carried is never passed."""
    offsets: list[int] = []
    o = start_skip
    for g in log_gaps:
        offsets.append(o)
        o += g
    hw = o
    done = {off for off, d in zip(offsets, done_pick, strict=False) if d}
    w = InFlightWindow[str](start_offset=0, max_window=10_000, already_done=frozenset(done))
    nxt = 0  # index of next record to deliver
    live: list[int] = []
    finished: set[int] = set()
    ceiling: int | None = None
    prev = w.safe_cursor
    for op, arg in ops:
        if op == "admit" and nxt < len(offsets):
            if ceiling is not None:
                continue
            off = offsets[nxt]
            nxt += 1
            if arg % 7 == 0:
                w.admit_finished(off)
                finished.add(off)
                continue
            e = w.admit(off, b"k%d" % (arg % 4), arg % 3, "p", 0.0)
            if off in done:
                assert e is None
            else:
                live.append(off)
        elif op == "complete":
            inflight = [x for x in live if (en := w.get(x)) is not None and en.in_flight]
            if inflight:
                x = inflight[arg % len(inflight)]
                w.complete(x)
                live.remove(x)
                finished.add(x)
        elif op == "observe" and ceiling is None:
            # position: just past the last delivered record, or up to next record (markers)
            pos = offsets[nxt] if nxt < len(offsets) else hw
            w.observe_position(pos)
        elif op == "give_back" and nxt < len(offsets):
            off = offsets[nxt]
            w.give_back(off)
            ceiling = off if ceiling is None else min(ceiling, off)
        cur = w.safe_cursor
        assert cur >= prev, (prev, cur)
        prev = cur
        # no loss: every record below the cursor is finished or carried done
        for off in offsets:
            if off < cur:
                assert off in done or off in finished, (off, cur, done, finished)
        # the cursor never rests on a carried offset, and carried ones are all named
        assert cur not in done
        named = set(w.finished_above_cursor())
        assert all(d < cur or d in named for d in done)
        assert named <= done | finished, named - done - finished
        # a given-back record not carried is never passed
        if ceiling is not None:
            first_not_done = min((x for x in offsets if x >= ceiling and x not in done), default=hw)
            assert cur <= first_not_done
        assert cur <= hw
