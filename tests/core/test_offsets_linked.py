"""Linked commit metadata: the whole finished set in a side record, the metadata pointing at it.

Exactly-once commits whose finished set outgrows the metadata write the whole set to a side
record in the same transaction and commit metadata that links it (its offset) and names the
runs nearest the cursor. What a resuming owner skips is the side record's set: these
properties check that it is exactly what was finished, that the metadata stays within its
budget and always finds its link, and that across a partition's sequence of commits the set a
reader would skip never loses an offset still above the cursor (so no committed output is
produced twice).
"""

from __future__ import annotations

import random
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from keyshared.core import offsets
from keyshared.core.offsets import (
    decode_finished,
    encode_linked,
    encode_monotone,
    encode_whole,
    encode_within,
    linked_record,
)
from keyshared.core.runs import OffsetRuns
from tests.core.test_offsets_monotone import _windows

_finished = st.lists(st.integers(0, 50_000), max_size=3000)


@settings(max_examples=200, deadline=None)
@given(
    cursor=st.integers(-1, 1000),
    finished=_finished,
    link=st.integers(0, 2**62),
    max_bytes=st.integers(60, 2000),
)
def test_linked_metadata_fits_names_a_subset_and_finds_its_link(
    cursor: int, finished: list[int], link: int, max_bytes: int
) -> None:
    above = OffsetRuns.from_offsets(finished).from_floor(cursor + 1)
    encoded = encode_linked(cursor, finished, link, max_bytes)
    assert len(encoded.text) <= max_bytes
    assert linked_record(encoded.text) == link
    named = decode_finished(cursor, encoded.text)
    assert named & above == named
    assert encoded.left_out == len(above) - len(named)
    # A later cursor reads the same metadata (the committed offset moved on since).
    later = cursor + 17
    assert decode_finished(later, encoded.text) == named.from_floor(later + 1)


@settings(max_examples=200, deadline=None)
@given(cursor=st.integers(-1, 1000), finished=_finished)
def test_the_side_record_holds_exactly_the_finished_set(cursor: int, finished: list[int]) -> None:
    above = OffsetRuns.from_offsets(finished).from_floor(cursor + 1)
    whole = encode_whole(cursor, finished, 10**6)
    assert whole is not None
    assert decode_finished(cursor, whole) == above
    assert linked_record(whole) is None  # a side record links nothing further


def test_other_strings_have_no_link() -> None:
    plain = encode_within(5, [7, 8]).text
    for text in ("", None, "foreign", plain, plain[:-2] + "00", "ks1:"):
        assert linked_record(text) is None


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    size=st.integers(1, 3000),
    steps=st.integers(1, 12),
    max_bytes=st.integers(60, 400),
    stuck=st.floats(0.0, 0.5),
)
def test_what_a_resuming_owner_skips_never_shrinks_above_the_cursor(
    seed: int, size: int, steps: int, max_bytes: int, stuck: float
) -> None:
    """The committer's rule replayed over a partition's windows (a fraction ``stuck`` of the
    records, a blocked key, finish late or never): the whole set in the metadata when it fits,
    else in a side record that the metadata links. A reader resolving the link skips exactly
    what was finished at each commit, so what one commit named stays named by every later one
    while it is above the cursor."""
    rng = random.Random(seed)
    finish_at = [steps + 1 if rng.random() < stuck else rng.randrange(steps) for _ in range(size)]
    side: dict[int, str] = {}  # the side topic: offset -> value
    skipped_before = OffsetRuns.from_offsets([])
    for cursor, finished in _windows(finish_at, steps):
        encoded = encode_within(cursor, finished, max_bytes)
        if encoded.left_out:
            link = len(side)
            whole = encode_whole(cursor, finished, 10**6)
            assert whole is not None
            side[link] = whole
            metadata = encode_linked(cursor, finished, link, max_bytes).text
        else:
            metadata = encoded.text
        assert len(metadata) <= max_bytes
        found = linked_record(metadata)
        skipped = decode_finished(cursor, side[found] if found is not None else metadata)
        assert skipped == finished
        assert skipped_before.from_floor(cursor + 1) & skipped == skipped_before.from_floor(
            cursor + 1
        )
        skipped_before = skipped


_fragmented = st.lists(st.integers(0, 400), max_size=300)


@settings(max_examples=300, deadline=None)
@given(
    cursor=st.integers(-1, 40),
    finished=_fragmented,
    previous=_fragmented,
    max_runs=st.integers(1, 12),
    max_bytes=st.integers(60, 4000),
)
def test_no_encoder_writes_what_the_decoder_refuses(
    cursor: int, finished: list[int], previous: list[int], max_runs: int, max_bytes: int
) -> None:
    """The decoder refuses a text of more than MAX_RUNS runs (it would name nothing, and a
    reader would redo records whose outputs are committed). Every encoder keeps to it: what it
    says it named is what a reader decodes. The cap is lowered so that hypothesis reaches it
    (at 262,144 runs, a regular pattern compresses into 4 KB)."""
    above = OffsetRuns.from_offsets(finished).from_floor(cursor + 1)
    with mock.patch.object(offsets, "_MAX_RUNS", max_runs):
        previous_text = encode_within(cursor, previous, max_bytes).text
        for encoded in (
            encode_within(cursor, finished, max_bytes),
            encode_linked(cursor, finished, 7, max_bytes),
            encode_monotone(cursor, finished, previous_text, max_bytes),
        ):
            named = decode_finished(cursor, encoded.text)
            assert len(named.runs) <= max_runs
            assert named <= above or encoded.text == previous_text
            if encoded.text != previous_text:
                assert len(named) == len(above) - encoded.left_out
        whole = encode_whole(cursor, finished, max_bytes)
        if len(above.runs) > max_runs:
            assert whole is None
        elif whole is not None:
            assert decode_finished(cursor, whole) == above


def test_a_regular_pattern_past_the_run_cap_is_not_claimed_named() -> None:
    """The reviewed case at the real cap: 262,145 one-offset runs (a marker after each, as an
    upstream transaction leaves) compress into about 120 characters, which fit any budget, yet
    the decoder refuses them. The encoder used to send them and count all as named."""
    finished = range(1, 2 * (offsets.MAX_RUNS + 1) + 1, 2)
    encoded = encode_within(0, finished, 4000)
    named = decode_finished(0, encoded.text)
    assert 0 < len(named) == offsets.MAX_RUNS + 1 - encoded.left_out
    assert encode_whole(0, finished, 10**6) is None
