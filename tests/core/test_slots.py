"""Tests for slots: the blake3 slot of a key, slot ranges and the owner map."""

from __future__ import annotations

import doctest
from itertools import pairwise

import pytest
from blake3 import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshared.core import slots as slots_module
from keyshared.core.slots import (
    MAX_SLOT,
    SLOT_COUNT,
    SlotMap,
    SlotOverlapError,
    SlotRange,
    slot_of,
    split_evenly,
)


@pytest.mark.parametrize(
    ("key", "digest_prefix", "slot"),
    [
        # blake3("") is the official test vector af1349b9f5f9a1a6...
        (b"", "af13", 0x13AF),
        (b"a", "1776", 0x7617),
        (b"customer-42", "579d", 0x9D57),
    ],
)
def test_slot_of_known_vectors(key: bytes, digest_prefix: str, slot: int) -> None:
    assert blake3(key).hexdigest().startswith(digest_prefix)
    assert slot_of(key) == slot


@given(st.binary(max_size=200))
def test_slot_of_is_first_two_digest_bytes_little_endian(key: bytes) -> None:
    assert slot_of(key) == int.from_bytes(blake3(key).digest()[:2], "little")
    assert 0 <= slot_of(key) < SLOT_COUNT


def test_slots_are_roughly_uniform_over_quarters() -> None:
    quarters = [0, 0, 0, 0]
    for index in range(40_000):
        quarters[slot_of(f"k{index}".encode()) * 4 // SLOT_COUNT] += 1
    assert max(quarters) / min(quarters) < 1.1


def test_slot_range_basics() -> None:
    whole = SlotRange(0, MAX_SLOT)
    assert whole.size == SLOT_COUNT
    assert 0 in whole and MAX_SLOT in whole and SLOT_COUNT not in whole and -1 not in whole
    assert "3" not in SlotRange(0, 10)
    single = SlotRange(7, 7)
    assert single.size == 1 and 7 in single and 8 not in single
    assert str(SlotRange(1, 9)) == "1-9"
    assert SlotRange.parse(" 10-20 ") == SlotRange(10, 20)
    assert SlotRange.parse("5") == SlotRange(5, 5)
    assert SlotRange(0, 5).overlaps(SlotRange(5, 9))
    assert not SlotRange(0, 4).overlaps(SlotRange(5, 9))
    with pytest.raises(AttributeError):
        whole.lo = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("lo", "hi", "message"),
    [
        (-1, 3, "SlotRange.lo"),
        (0, SLOT_COUNT, "SlotRange.hi"),
        (9, 3, "must not exceed"),
    ],
)
def test_slot_range_validation_names_the_field(lo: int, hi: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SlotRange(lo, hi)


def test_slot_range_rejects_non_integers() -> None:
    with pytest.raises(TypeError, match=r"SlotRange\.lo"):
        SlotRange(1.0, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lo-hi"):
        SlotRange.parse("a-b")


def test_slot_map_lookup_and_gaps() -> None:
    slot_map = SlotMap({SlotRange(100, 199): "b", SlotRange(0, 49): "a", SlotRange(300, 300): "a"})
    assert slot_map.owner_of(0) == "a"
    assert slot_map.owner_of(49) == "a"
    assert slot_map.owner_of(50) is None
    assert slot_map.owner_of(150) == "b"
    assert slot_map.owner_of(300) == "a"
    assert slot_map.owner_of(301) is None
    assert slot_map.owner_of(MAX_SLOT) is None
    assert slot_map.ranges_of("a") == [SlotRange(0, 49), SlotRange(300, 300)]
    assert slot_map.ranges_of("nobody") == []
    assert slot_map.members == frozenset({"a", "b"})
    assert slot_map.unowned() == [
        SlotRange(50, 99),
        SlotRange(200, 299),
        SlotRange(301, MAX_SLOT),
    ]
    assert list(slot_map) == [SlotRange(0, 49), SlotRange(100, 199), SlotRange(300, 300)]
    assert len(slot_map) == 3
    assert slot_map == SlotMap(
        [(SlotRange(0, 49), "a"), (SlotRange(100, 199), "b"), (SlotRange(300, 300), "a")]
    )
    assert "0-49: 'a'" in repr(slot_map)


def test_empty_slot_map_owns_nothing() -> None:
    slot_map = SlotMap()
    assert slot_map.owner_of(0) is None
    assert slot_map.unowned() == [SlotRange(0, MAX_SLOT)]


def test_overlap_error_names_both_ranges_and_owners() -> None:
    with pytest.raises(SlotOverlapError) as caught:
        SlotMap({SlotRange(0, 100): "a", SlotRange(100, 200): "b"})
    message = str(caught.value)
    assert "0-100" in message and "100-200" in message
    assert "'a'" in message and "'b'" in message
    assert isinstance(caught.value, ValueError)


def test_slot_map_rejects_wrong_types() -> None:
    with pytest.raises(TypeError, match="SlotRange"):
        SlotMap([((0, 10), "a")])  # type: ignore[list-item]


@pytest.mark.parametrize("count", [1, 2, 3, 7, 1000, SLOT_COUNT])
def test_split_evenly_covers_everything_once(count: int) -> None:
    ranges = split_evenly(count)
    assert len(ranges) == count
    assert ranges[0].lo == 0 and ranges[-1].hi == MAX_SLOT
    for left, right in pairwise(ranges):
        assert right.lo == left.hi + 1
    sizes = {slot_range.size for slot_range in ranges}
    assert max(sizes) - min(sizes) <= 1
    slot_map = SlotMap({slot_range: str(index) for index, slot_range in enumerate(ranges)})
    assert slot_map.unowned() == []


@pytest.mark.parametrize("count", [0, -1, SLOT_COUNT + 1])
def test_split_evenly_rejects_bad_counts(count: int) -> None:
    with pytest.raises(ValueError, match="count"):
        split_evenly(count)


@settings(max_examples=80)
@given(
    cuts=st.lists(
        st.integers(min_value=0, max_value=MAX_SLOT), min_size=1, max_size=30, unique=True
    ),
    owners=st.lists(st.sampled_from(["a", "b", "c"]), min_size=30, max_size=30),
    slots=st.lists(st.integers(min_value=0, max_value=MAX_SLOT), max_size=50),
    data=st.data(),
)
def test_owner_of_agrees_with_linear_scan(
    cuts: list[int], owners: list[str], slots: list[int], data: st.DataObject
) -> None:
    # Build disjoint ranges from sorted cut points, keep a random subset (leaving gaps).
    cuts = sorted(cuts)
    bounds = [*cuts, SLOT_COUNT]
    ranges = [SlotRange(lo, hi - 1) for lo, hi in pairwise(bounds)]
    kept = [r for r in ranges if data.draw(st.booleans())]
    assignments = {r: owners[index] for index, r in enumerate(kept)}
    slot_map = SlotMap(assignments)
    for slot in [*slots, *cuts, 0, MAX_SLOT]:
        expected = next((owner for r, owner in assignments.items() if slot in r), None)
        assert slot_map.owner_of(slot) == expected


def test_docstring_examples_run() -> None:
    results = doctest.testmod(slots_module)
    assert results.attempted > 0 and results.failed == 0
