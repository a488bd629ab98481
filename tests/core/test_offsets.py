"""Tests for the commit-metadata codec: round trips, size limits, and hostile input."""

from __future__ import annotations

import base64
import doctest
import random
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshared.core import offsets as offsets_module
from keyshared.core.offsets import (
    DEFAULT_MAX_BYTES,
    METADATA_PREFIX,
    Encoded,
    decode_finished,
    encode_finished,
    encode_within,
    is_keyshared_metadata,
)
from keyshared.core.runs import OffsetRuns

KAFKA_METADATA_LIMIT = 4096


def round_trip(cursor: int, finished: set[int]) -> frozenset[int]:
    text = encode_finished(cursor, finished)
    assert text is not None
    assert text.isascii()
    assert len(text) <= DEFAULT_MAX_BYTES
    return decode_finished(cursor, text)


def test_example_and_prefix() -> None:
    text = encode_finished(100, [102, 103, 104, 110, 99, 100, 104])
    assert text is not None and text.startswith(METADATA_PREFIX)
    assert is_keyshared_metadata(text)
    assert decode_finished(100, text) == {102, 103, 104, 110}


def test_nothing_above_the_cursor_encodes_as_empty() -> None:
    assert encode_finished(100, []) == ""
    assert encode_finished(100, [1, 50, 100]) == ""
    assert decode_finished(100, "") == frozenset()


def test_decode_with_a_later_cursor_drops_what_it_covers() -> None:
    text = encode_finished(100, [101, 102, 150, 151])
    assert decode_finished(101, text) == {102, 150, 151}
    assert decode_finished(150, text) == {151}
    assert decode_finished(151, text) == frozenset()


def test_decode_with_an_earlier_cursor_ignores_the_metadata() -> None:
    # The group was rewound below the encoded base: reprocess everything rather than skip.
    text = encode_finished(100, [101, 102])
    assert decode_finished(99, text) == frozenset()


@pytest.mark.parametrize("cursor", [-1, 0, 1, 2**31, 2**40, 2**62])
def test_any_cursor_round_trips(cursor: int) -> None:
    finished = {cursor + 1, cursor + 3, cursor + 1000}
    assert round_trip(cursor, finished) == finished


@pytest.mark.parametrize(
    ("name", "finished"),
    [
        ("every other over a wide span", {1000 + 2 * index for index in range(1, 100_000)}),
        ("one dense run", set(range(1001, 201_000))),
        ("dense runs with holes", {o for o in range(1001, 60_000) if o % 97 and o % 101}),
        ("single far offset", {10**15}),
        ("first offset only", {1001}),
        ("two far apart", {1001, 10**12}),
    ],
)
def test_worst_and_edge_cases_round_trip(name: str, finished: set[int]) -> None:
    text = encode_finished(1000, finished)
    assert text is not None, name
    print(f"\n{name}: {len(finished)} offsets -> {len(text)} chars")
    assert decode_finished(1000, text) == finished


@settings(max_examples=200, deadline=None)
@given(
    cursor=st.integers(min_value=-1, max_value=2**50),
    deltas=st.sets(st.integers(min_value=-50, max_value=5_000), max_size=400),
)
def test_round_trip_random_sets(cursor: int, deltas: set[int]) -> None:
    finished = {cursor + delta for delta in deltas}
    expected = {offset for offset in finished if offset > cursor}
    assert round_trip(cursor, finished) == expected


@settings(max_examples=25, deadline=None)
@given(density=st.floats(min_value=0.0, max_value=1.0), seed=st.integers())
def test_any_set_within_25000_of_the_cursor_fits(density: float, seed: int) -> None:
    # The bitset bounds the size whatever the pattern: 25,000 bits is about 3.1 KiB raw.
    rng = random.Random(seed)
    finished = {1000 + delta for delta in range(1, 25_001) if rng.random() < density}
    finished.add(26_000)
    assert round_trip(1000, finished) == finished


def test_too_large_returns_none() -> None:
    rng = random.Random(3)
    finished = set(rng.sample(range(1001, 1_000_000), 20_000))
    assert encode_finished(1000, finished) is None
    assert encode_finished(1000, [1001, 1003], max_bytes=5) is None
    small = encode_finished(1000, [1001, 1003])
    assert small is not None and encode_finished(1000, [1001, 1003], max_bytes=len(small))


def test_decoder_refuses_more_runs_than_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    text = encode_finished(0, range(1, 40, 2))
    assert text is not None and len(decode_finished(0, text)) == 20
    monkeypatch.setattr(offsets_module, "_MAX_RUNS", 10)
    assert decode_finished(0, text) == frozenset()


def test_a_stuck_key_with_200000_finished_above_it_fits_in_a_few_bytes() -> None:
    """Issue 23: one stuck record at the head, 200,000 finished records behind it (and a
    handful still running among them) fits Kafka's default 4,096 bytes with room to spare."""
    running = {51_000, 121_000, 200_999}
    finished = OffsetRuns.from_runs(
        [(1001, 51_000), (51_001, 121_000), (121_001, 200_999), (201_000, 201_001)]
    )
    assert len(finished) == 200_000 - 3 and all(o not in finished for o in running)
    text = encode_finished(1000, finished)
    assert text is not None and len(text) < 64
    decoded = decode_finished(1000, text)
    assert isinstance(decoded, OffsetRuns) and decoded.runs == finished.runs


def test_encode_within_keeps_the_runs_nearest_the_cursor_and_counts_the_rest() -> None:
    rng = random.Random(5)
    finished = OffsetRuns.from_offsets(rng.sample(range(1001, 400_000), 30_000))
    assert encode_finished(1000, finished) is None
    encoded = encode_within(1000, finished)
    assert 0 < len(encoded.text) <= DEFAULT_MAX_BYTES
    kept = decode_finished(1000, encoded.text)
    assert kept <= finished  # never claims an unfinished record
    assert len(kept) + encoded.left_out == len(finished)
    assert max(kept) < min(finished - kept)  # the prefix nearest the cursor
    assert encode_within(1000, finished, max_bytes=5) == Encoded("", len(finished))


def test_decoding_never_expands_a_run() -> None:
    text = encode_finished(0, OffsetRuns.from_runs([(1, 10**15)]))
    assert text is not None
    decoded = decode_finished(0, text)
    assert len(decoded) == 10**15 - 1 and decoded.run_count == 1
    assert decode_finished(10**12, text).runs == ((10**12 + 1, 10**15),)


def _capacity(make: Callable[[int], set[int]], high: int) -> int:
    """Largest n for which make(n) still fits in the default limit (binary search)."""
    low = 1
    while low < high:
        middle = (low + high + 1) // 2
        if encode_finished(1000, make(middle)) is None:
            high = middle - 1
        else:
            low = middle
    return low


def _random_with_density(density: float) -> Callable[[int], set[int]]:
    def make(count: int) -> set[int]:
        rng = random.Random(count)
        return {1001 + delta for delta in rng.sample(range(int(count / density)), count)}

    return make


def _dense_with_holes(count: int) -> set[int]:
    # Typical: one slow key holds the cursor, about 1% of offsets above it still in flight.
    rng = random.Random(count)
    finished: set[int] = set()
    offset = 1001
    while len(finished) < count:
        if rng.random() >= 0.01:
            finished.add(offset)
        offset += 1
    return finished


def test_capacity_under_the_kafka_limit() -> None:
    figures = {
        "typical (dense, 1% holes)": _capacity(_dense_with_holes, 300_000),
        "random, density 50%": _capacity(_random_with_density(0.5), 20_000),
        "random, density 1% (sparse)": _capacity(_random_with_density(0.01), 5_000),
    }
    for name, count in figures.items():
        print(f"\ncapacity in {DEFAULT_MAX_BYTES} chars, {name}: {count} finished offsets")
    assert figures["typical (dense, 1% holes)"] > 100_000
    assert figures["random, density 50%"] > 12_000
    assert figures["random, density 1% (sparse)"] > 1_500
    assert DEFAULT_MAX_BYTES < KAFKA_METADATA_LIMIT


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        "",
        "some other tool's note",
        "ks1:",
        "ks1:!!!!",
        "ks1:not base85 \x00",
        "ks1:" + base64.b85encode(b"\x01").decode(),
        "ks1:" + base64.b85encode(b"\x02\x00\x00\x00\x00\x00\x00").decode(),
        "ks2:whatever",
    ],
)
def test_foreign_or_corrupt_metadata_is_empty(metadata: str | None) -> None:
    assert decode_finished(0, metadata) == frozenset()


def _sealed(content: bytes) -> str:
    """A correctly framed and checksummed payload, for crafting hostile content."""
    payload = content + zlib.crc32(content).to_bytes(4, "little")
    return METADATA_PREFIX + base64.b85encode(payload).decode()


def test_crafted_payloads_cannot_exhaust_memory() -> None:
    huge_run = bytes([1, 0, 0]) + bytes([0]) + bytes([0xFF] * 8 + [0x7F])
    assert decode_finished(0, _sealed(huge_run)) == frozenset()
    bomb = zlib.compress(b"\xff" * (8 << 20), 9)
    assert decode_finished(0, _sealed(bytes([1, 0x81, 0]) + bomb)) == frozenset()
    unknown_kind = bytes([1, 3, 0, 1, 1])
    assert decode_finished(0, _sealed(unknown_kind)) == frozenset()
    truncated_varint = bytes([1, 0, 0, 0x80])
    assert decode_finished(0, _sealed(truncated_varint)) == frozenset()


@settings(max_examples=300)
@given(
    finished=st.sets(st.integers(min_value=1, max_value=3_000), min_size=1, max_size=200),
    position=st.integers(min_value=0),
    replacement=st.characters(min_codepoint=0, max_codepoint=0x10FFFF),
)
def test_damaged_metadata_never_raises_and_never_invents(
    finished: set[int], position: int, replacement: str
) -> None:
    text = encode_finished(0, finished)
    assert text is not None
    index = len(METADATA_PREFIX) + position % (len(text) - len(METADATA_PREFIX))
    damaged = text[:index] + replacement + text[index + 1 :]
    decoded = decode_finished(0, damaged)
    # The checksum catches the damage (or it was a no-op); either way nothing is made up.
    assert decoded in (frozenset(), frozenset(finished))


@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(text: str) -> None:
    decode_finished(0, METADATA_PREFIX + text)
    decode_finished(0, text)


def test_is_keyshared_metadata() -> None:
    assert is_keyshared_metadata("ks1:abc")
    assert not is_keyshared_metadata("")
    assert not is_keyshared_metadata(None)
    assert not is_keyshared_metadata("KS1:abc")


def test_docstring_examples_run() -> None:
    results = doctest.testmod(offsets_module)
    assert results.attempted > 0 and results.failed == 0
