"""The incarnation stamp of commit metadata: the topic id a committed cursor counts in.

A stamp never changes what the metadata says about finished offsets, and a reader that finds
another id than the topic's knows the offset belongs to a log that is gone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keyshared.core.offsets import (
    METADATA_PREFIX,
    decode_finished,
    encode_finished,
    encode_linked,
    incarnation_of,
    is_keyshared_metadata,
    linked_record,
    stamp_incarnation,
    without_incarnation,
)

# confluent-kafka prints topic ids as 22 characters of standard base64 (``+`` and ``/`` too;
# a separator among them made the stamp refuse about a third of all ids).
topic_ids = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
    min_size=22,
    max_size=22,
)
finished_sets = st.sets(st.integers(min_value=1, max_value=5000), max_size=200)


@given(cursor=st.integers(min_value=0, max_value=10**12), offsets=finished_sets, topic_id=topic_ids)
def test_a_stamp_keeps_what_the_metadata_says_and_names_its_topic(
    cursor: int, offsets: set[int], topic_id: str
) -> None:
    text = encode_finished(cursor, sorted(cursor + o for o in offsets))
    stamped = stamp_incarnation(text, topic_id)
    assert is_keyshared_metadata(stamped)
    assert incarnation_of(stamped) == topic_id
    assert decode_finished(cursor, stamped) == decode_finished(cursor, text)
    assert len(stamped) == len(text or METADATA_PREFIX) + 1 + len(topic_id)


@given(topic_id=topic_ids, link=st.integers(min_value=0, max_value=10**12))
def test_a_stamped_link_still_names_its_side_record(topic_id: str, link: int) -> None:
    text = encode_linked(10, [12, 13], link, 4000).text
    assert linked_record(stamp_incarnation(text, topic_id)) == linked_record(text) == link


@given(first=topic_ids, second=topic_ids)
def test_stamping_again_replaces_the_id(first: str, second: str) -> None:
    text = encode_finished(5, [7])
    twice = stamp_incarnation(stamp_incarnation(text, first), second)
    assert incarnation_of(twice) == second
    assert decode_finished(5, twice) == decode_finished(5, text)


def test_a_cursor_without_finished_offsets_is_stamped_too() -> None:
    stamped = stamp_incarnation("", "AAAAAAAAAAAAAAAAAAAAAA")
    assert stamped == f"{METADATA_PREFIX},AAAAAAAAAAAAAAAAAAAAAA"
    assert incarnation_of(stamped) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert not decode_finished(0, stamped)
    assert linked_record(stamped) is None


@pytest.mark.parametrize("metadata", ["", "ks1:", encode_finished(3, [5]), "other tool", None])
def test_unstamped_or_foreign_metadata_names_no_incarnation(metadata: str | None) -> None:
    assert incarnation_of(metadata) is None


def test_without_an_id_nothing_is_stamped() -> None:
    text = encode_finished(3, [5])
    assert stamp_incarnation(text, "") == text


@pytest.mark.parametrize("bad", ["a,b", "with space"])
def test_an_id_that_would_break_the_stamp_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a topic id"):
        stamp_incarnation("", bad)


def test_another_tools_metadata_is_never_stamped() -> None:
    with pytest.raises(ValueError, match="not keyshared's commit metadata"):
        stamp_incarnation("their notes", "AAAAAAAAAAAAAAAAAAAAAA")


@given(cursor=st.integers(min_value=0, max_value=10**6), offsets=finished_sets, topic_id=topic_ids)
def test_without_the_stamp_the_metadata_is_what_was_stamped(
    cursor: int, offsets: set[int], topic_id: str
) -> None:
    text = encode_finished(cursor, sorted(cursor + o for o in offsets))
    assert without_incarnation(stamp_incarnation(text, topic_id)) == text
    assert without_incarnation(text) == text
