"""A commit's bounded read of a deep window: true to name, and honest about what it left out.

The at-least-once committer reads a window's finished offsets only up to its ``max_holes``-th
unfinished record (``InFlightWindow.nearest_finished``), because the metadata names the runs
nearest the cursor and nothing past a few thousand. Whatever the window (keys, gaps, offsets
finished before a restart, records completed in any order), the bounded read must be exactly
the whole set cut below its last kept unfinished record (so a subset of what is finished: an
at-least-once commit never names an unfinished record), and the count it reports as beyond
must be exactly how many finished offsets it did not return.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from keyshared.core.runs import OffsetRuns
from keyshared.core.window import Entry, InFlightWindow

KEYS: list[bytes | None] = [None, b"a", b"b", b"c", b"d"]


@st.composite
def windows(draw: st.DrawFn) -> InFlightWindow[int]:
    start = draw(st.integers(0, 5))
    done_before = draw(st.sets(st.integers(start, start + 80), max_size=20))
    window: InFlightWindow[int] = InFlightWindow(
        start, per_worker_capacity=draw(st.integers(1, 4)), already_done=sorted(done_before)
    )
    running: list[Entry[int]] = []
    offset = start
    for _ in range(draw(st.integers(1, 60))):
        offset += draw(st.integers(0, 2))  # a gap: offsets never delivered
        key = draw(st.sampled_from(KEYS))
        entry = window.admit(offset, key, draw(st.integers(0, 2)), offset, 0.0)
        if entry is not None:
            running.append(entry)
        offset += 1
        while running:
            if not draw(st.booleans()):
                break
            done = running.pop(draw(st.integers(0, len(running) - 1)))
            running.extend(window.complete(done))
    if draw(st.booleans()):
        window.observe_position(offset + draw(st.integers(0, 3)))
    return window


@settings(max_examples=400, deadline=None)
@given(window=windows(), max_holes=st.integers(1, 12))
def test_the_bounded_read_is_the_whole_set_cut_below_its_last_hole(
    window: InFlightWindow[int], max_holes: int
) -> None:
    whole = window.finished_above_cursor()
    runs, beyond = window.nearest_finished(max_holes)
    assert set(runs) <= set(whole), "named an offset that is not finished"
    assert len(runs) + beyond == len(whole), "the count left out is not what was left out"
    if beyond == 0 and window.size <= max_holes:
        assert runs == whole
    if runs:
        assert runs == OffsetRuns.coerce(o for o in whole if o <= max(runs))


def test_a_deep_window_is_read_only_to_its_nth_unfinished_record() -> None:
    window: InFlightWindow[int] = InFlightWindow(0, per_worker_capacity=10_000)
    started = [window.admit(o, b"%d" % o, 0, o, 0.0) for o in range(10_000)]
    for entry in started[1::2]:  # every odd offset finishes: 5,000 holes, 4,999 runs above 0
        assert entry is not None
        window.complete(entry)
    runs, beyond = window.nearest_finished(100)
    assert list(runs) == list(range(1, 199, 2))  # below the 100th unfinished record (198)
    assert beyond == 5_000 - 99
