"""Monotone commit metadata: an offset a commit named stays named while it is above the cursor.

Exactly-once outputs are committed with the metadata that first names their record; a later
commit of the same partition that leaves the record out would have the next owner (or a redo)
run it again and commit its outputs twice. These properties replay sequences of windows the way
a partition with a stuck record produces them: the cursor only moves forward, records above it
finish in any order, and the metadata budget is far too small for everything finished.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from keyshared.core.offsets import (
    decode_finished,
    encode_finished,
    encode_monotone,
    encode_within,
)
from keyshared.core.runs import OffsetRuns


def _windows(finish_at: list[int], steps: int) -> list[tuple[int, OffsetRuns]]:
    """(cursor, finished above it) at ``steps`` moments of one partition whose offset ``o``
    finishes at moment ``finish_at[o]`` (``steps`` or later: not within the run); the cursor
    is the first unfinished offset, so it never goes back."""
    windows = []
    for now in range(steps):
        done = [o for o, at in enumerate(finish_at) if at <= now]
        cursor = next((o for o, at in enumerate(finish_at) if at > now), len(finish_at))
        windows.append((cursor, OffsetRuns.from_offsets(done).from_floor(cursor + 1)))
    return windows


def _partition_runs(size: int, steps: int, max_bytes: int, **more: Any) -> Any:
    """Hypothesis ``given`` of a replayed partition: a seed, up to ``size`` offsets, up to
    ``steps`` moments, a metadata budget of 24 to ``max_bytes``, and ``more``."""
    return given(
        seed=st.integers(0, 2**32),
        size=st.integers(1, size),
        steps=st.integers(1, steps),
        max_bytes=st.integers(24, max_bytes),
        **more,
    )


@settings(max_examples=150, deadline=None)
@_partition_runs(size=3000, steps=12, max_bytes=400, stuck=st.floats(0.0, 0.5))
def test_a_named_offset_stays_named_above_the_cursor(
    seed: int, size: int, stuck: float, steps: int, max_bytes: int
) -> None:
    """Each offset finishes at a random moment, a fraction ``stuck`` of them (a blocked key)
    only at the very end or never."""
    rng = random.Random(seed)
    finish_at = [steps + 1 if rng.random() < stuck else rng.randrange(steps) for _ in range(size)]
    previous = ""
    named_before: set[int] = set()
    for cursor, finished in _windows(finish_at, steps):
        encoded = encode_monotone(cursor, finished, previous, max_bytes)
        named = decode_finished(cursor, encoded.text)
        assert named <= finished, "names an offset that is not finished"
        lost = {o for o in named_before if o > cursor} - set(named)
        assert not lost, f"un-named {sorted(lost)[:5]} above cursor {cursor}"
        assert encoded.left_out == len(finished) - len(named)
        if encoded.text != previous:  # a resent previous text was sent (and fit) before
            assert len(encoded.text) <= max_bytes
        previous, named_before = encoded.text, set(named)


@settings(max_examples=200, deadline=None)
@given(
    cursor=st.integers(0, 50),
    finished=st.sets(st.integers(0, 600), max_size=300),
    earlier=st.sets(st.integers(0, 600), max_size=300),
    base=st.integers(0, 60),
    max_bytes=st.integers(24, 200),
)
def test_never_names_an_unfinished_offset_whatever_the_previous_text(
    cursor: int, finished: set[int], earlier: set[int], base: int, max_bytes: int
) -> None:
    """A previous text from another window (a rewound group, a foreign member, a compacted
    input whose gaps it named) may name offsets that are not finished now, or be encoded
    against a later cursor: it is never trusted beyond what is finished, and what it names
    that is still finished stays named, over the budget if it must (the caller then writes a
    side record or keeps its last commit: naming fewer would un-name committed records)."""
    previous = encode_within(base, earlier, max_bytes).text
    encoded = encode_monotone(cursor, OffsetRuns.from_offsets(finished), previous, max_bytes)
    named = decode_finished(cursor, encoded.text)
    above = {o for o in finished if o > cursor}
    still = set(decode_finished(cursor, previous)) & above
    assert named <= above
    assert still <= named
    assert len(encoded.text) <= max_bytes or encoded.text == previous or named == still
    assert encoded.left_out == len(above) - len(named)


def test_keeps_the_previous_set_and_adds_the_nearest_new_runs() -> None:
    # 40 finished singletons far from the cursor were named; then the records nearer the
    # cursor finish: the nearest-first encoding would drop the far ones, this one keeps them.
    far = set(range(5001, 5081, 2))
    previous = encode_within(0, far, 200)
    assert previous.left_out == 0
    rng = random.Random(7)
    near = {o for o in range(1, 3000) if rng.random() < 0.5}  # irregular: compresses badly
    finished = OffsetRuns.from_offsets(far | near)
    plain = decode_finished(0, encode_within(0, finished, 200).text)
    assert not far <= plain  # the defect the monotone encoding exists for
    encoded = encode_monotone(0, finished, previous.text, 200)
    named = decode_finished(0, encoded.text)
    assert far <= named
    new = sorted(named - far)
    assert new and new == sorted(near)[: len(new)]  # the nearest new ones, in a prefix
    assert encoded.left_out == len(finished) - len(named)


def test_the_previous_text_is_resent_when_nothing_smaller_keeps_it() -> None:
    rng = random.Random(11)
    finished = OffsetRuns.from_offsets(o for o in range(1, 4000) if rng.random() < 0.5)
    previous = encode_within(0, finished, 300)
    assert previous.left_out
    named = decode_finished(0, previous.text)
    # The cursor moved onto a named offset's neighbour: re-encoding may cost as much; the
    # result always names at least what is left of the previous set.
    for cursor in (0, 2, 50):
        encoded = encode_monotone(cursor, finished.from_floor(cursor + 1), previous.text, 300)
        assert {o for o in named if o > cursor} <= decode_finished(cursor, encoded.text)


def test_everything_that_fits_is_encoded_as_before() -> None:
    finished = [5, 6, 7, 20]
    assert encode_monotone(4, finished, "", 4000).text == encode_finished(4, finished)
    previous = encode_finished(0, [5, 6])
    assert previous is not None
    assert encode_monotone(4, finished, previous).text == encode_finished(4, finished)


@settings(max_examples=100, deadline=None)
@_partition_runs(size=2000, steps=10, max_bytes=300, keys=st.integers(1, 40))
def test_per_key_the_named_set_is_a_prefix_of_the_keys_finished_records(
    seed: int, size: int, keys: int, steps: int, max_bytes: int
) -> None:
    """Outputs go out as their records get named; a key's outputs keep the key's order only if
    no record of the key is named while an earlier finished one above the cursor is not."""
    rng = random.Random(seed)
    key_of = [rng.randrange(keys) for _ in range(size)]
    finish_at: list[int] = []
    last: dict[int, int] = {}
    for key in key_of:  # a key's records finish in offset order; key 0 is stuck at its first
        at = steps + 1 if key == 0 else max(last.get(key, 0), rng.randrange(steps))
        last[key] = at
        finish_at.append(at)
    previous = ""
    for cursor, finished in _windows(finish_at, steps):
        previous = encode_monotone(cursor, finished, previous, max_bytes).text
        named = decode_finished(cursor, previous)
        waiting: set[int] = set()  # keys with a finished record above the cursor not named
        for offset in range(cursor + 1, size):
            if offset in named:
                assert key_of[offset] not in waiting, f"offset {offset} named out of key order"
            elif offset in finished:
                waiting.add(key_of[offset])
