"""keyshared.core.admission: which records a key_shared member runs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from keyshared.core.admission import NULL_SLOT, Admission
from keyshared.core.claims import PartitionClaims
from keyshared.core.slots import MAX_SLOT, SlotRange, slot_of

LOW_HALF = SlotRange(0, MAX_SLOT // 2)


def _claims(slots: SlotRange, start: int = 0) -> PartitionClaims:
    return PartitionClaims.resolve([(slots, 1)], [], base=start)


@given(st.binary(max_size=16), st.integers(0, 10**9))
def test_a_keyed_record_is_run_exactly_when_its_slot_is_held(key: bytes, offset: int) -> None:
    rule = Admission([], null_keys_ordered=False)
    held = LOW_HALF.lo <= slot_of(key) <= LOW_HALF.hi
    assert rule.of(_claims(LOW_HALF))(key, offset) is held
    assert rule.slot(key, offset) == slot_of(key)


@given(st.integers(0, 10**9))
def test_null_keys_spread_by_offset_unless_ordered(offset: int) -> None:
    assert Admission([], null_keys_ordered=False).slot(None, offset) == offset & 0xFFFF
    assert Admission([], null_keys_ordered=True).slot(None, offset) == NULL_SLOT


def test_a_partition_not_read_runs_nothing() -> None:
    assert not Admission([], null_keys_ordered=False).of(None)(b"k", 0)


def test_records_below_the_resume_point_are_not_run() -> None:
    rule = Admission([], null_keys_ordered=False)
    accepts = rule.of(_claims(SlotRange(0, MAX_SLOT), start=10))
    assert not accepts(b"k", 9)
    assert accepts(b"k", 10)


def test_key_filters_keep_other_keys_and_null_keys_out() -> None:
    accepts = Admission(["order-*"], null_keys_ordered=True).of(_claims(SlotRange(0, MAX_SLOT)))
    assert accepts(b"order-1", 0)
    assert not accepts(b"invoice-1", 0)
    assert not accepts(None, 0)
