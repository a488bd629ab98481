"""The split-key detector: found once, per topic, in bounded memory."""

from __future__ import annotations

from keyshared.core.split_keys import SplitKey, SplitKeyDetector


def test_sampling_mask_follows_the_bits() -> None:
    assert SplitKeyDetector(sample_bits=0).mask == 0
    assert SplitKeyDetector().mask == 0b1111  # one key in 16 by default


def test_a_key_in_two_partitions_is_found_once_with_both_partitions() -> None:
    d = SplitKeyDetector(sample_bits=0)
    assert d.note("t", 2, 10, b"a") is None
    assert d.note("t", 5, 10, b"a") == SplitKey("t", b"a", (2, 5))
    assert d.note("t", 7, 10, b"a") is None
    assert d.note("t", 2, 10, b"a") is None
    assert d.take() == [(SplitKey("t", b"a", (2, 5)), 1)]
    assert d.take() == []


def test_topics_are_independent() -> None:
    d = SplitKeyDetector(sample_bits=0)
    d.note("a", 0, 10, b"k")
    assert d.note("b", 1, 10, b"k") is None  # the same key in another topic is no split


def test_memory_is_bounded_and_the_oldest_keys_go_first() -> None:
    d = SplitKeyDetector(sample_bits=0, max_keys=3)
    for h in range(5):
        d.note("t", 0, h, b"k%d" % h)
    assert d.note("t", 1, 0, b"k0") is None  # forgotten: seen afresh, not a split
    assert d.note("t", 1, 4, b"k4") is not None  # still remembered
    assert len(d._seen["t"]) == 3


def test_take_counts_per_topic_and_keeps_the_first_example() -> None:
    d = SplitKeyDetector(sample_bits=0)
    for h in range(5):
        d.note("t", 0, h, b"k%d" % h)
        d.note("t", 1, h, b"k%d" % h)
    d.note("u", 0, 9, b"x")
    d.note("u", 2, 9, b"x")
    assert d.take() == [(SplitKey("t", b"k0", (0, 1)), 5), (SplitKey("u", b"x", (0, 2)), 1)]
