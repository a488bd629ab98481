"""Tests for glob key filters, including agreement with fnmatch on random input."""

from __future__ import annotations

import doctest
import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshared.core import filters as filters_module
from keyshared.core.filters import KeyFilter, glob_match


@pytest.mark.parametrize(
    ("pattern", "key", "expected"),
    [
        ("payment", b"payment", True),
        ("payment", b"payments", False),
        ("ship*", b"shipping", True),
        ("ship*", b"ship", True),
        ("ship*", b"shi", False),
        ("eu-west-?", b"eu-west-1", True),
        ("eu-west-?", b"eu-west-12", False),
        ("eu-west-?", b"eu-west-", False),
        ("*-eu", b"orders-eu", True),
        ("*-eu", b"orders-us", False),
        ("a*b*c", b"axxbyyc", True),
        ("a*b*c", b"axxbyy", False),
        ("a*b?c", b"abbbxc", True),
        ("*a*a*a*a*a*b", b"a" * 40, False),
        ("[abc]", b"[abc]", True),
        ("[abc]", b"a", False),
        ("", b"", True),
        ("", b"x", False),
        ("?", b"", False),
        ("caf\u00e9*", "caf\u00e9-1".encode(), True),
        ("caf?", "caf\u00e9".encode(), False),
        ("caf??", "caf\u00e9".encode(), True),
    ],
)
def test_single_pattern(pattern: str, key: bytes, expected: bool) -> None:
    assert KeyFilter([pattern]).accepts(key) is expected
    assert glob_match(pattern.encode(), key) is expected


def test_any_of_several_patterns() -> None:
    key_filter = KeyFilter(["payment", "invoice-*", "*-eu", "r?f*nd"])
    assert key_filter.accepts(b"payment")
    assert key_filter.accepts(b"invoice-9")
    assert key_filter.accepts(b"orders-eu")
    assert key_filter.accepts(b"refund")
    assert not key_filter.accepts(b"shipping")
    assert not key_filter.accepts(b"")
    assert not key_filter.accepts(None)
    assert not key_filter.accepts_all
    assert key_filter.patterns == ("payment", "invoice-*", "*-eu", "r?f*nd")
    assert repr(key_filter) == "KeyFilter(['payment', 'invoice-*', '*-eu', 'r?f*nd'])"


@pytest.mark.parametrize("patterns", [[], ["*"], ["**"], ["payment", "*"]])
def test_accept_everything_including_null_keys(patterns: list[str]) -> None:
    key_filter = KeyFilter(patterns)
    assert key_filter.accepts_all
    assert key_filter.accepts(None)
    assert key_filter.accepts(b"")
    assert key_filter.accepts(b"\xff\x00anything")


def test_empty_key_is_an_ordinary_key() -> None:
    assert KeyFilter([""]).accepts(b"")
    assert not KeyFilter([""]).accepts(None)
    assert KeyFilter(["?*"]).accepts(b"") is False


def test_rejects_a_bare_string_and_non_str_patterns() -> None:
    with pytest.raises(TypeError, match="single string"):
        KeyFilter("payment*")
    with pytest.raises(TypeError, match="str"):
        KeyFilter([b"payment"])  # type: ignore[list-item]


ALPHABET = "ab-*?"
KEY_ALPHABET = "ab-"


@settings(max_examples=2000)
@given(
    pattern=st.text(alphabet=ALPHABET, max_size=10),
    key=st.text(alphabet=KEY_ALPHABET, max_size=14),
)
def test_agrees_with_fnmatchcase_small_alphabet(pattern: str, key: str) -> None:
    assert KeyFilter([pattern]).accepts(key.encode()) == fnmatch.fnmatchcase(key, pattern)


printable_without_bracket = st.characters(
    min_codepoint=32, max_codepoint=126, blacklist_characters="["
)


@settings(max_examples=1000)
@given(
    patterns=st.lists(st.text(alphabet=printable_without_bracket, max_size=12), max_size=4),
    key=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=16),
)
def test_agrees_with_fnmatchcase_on_ascii(patterns: list[str], key: str) -> None:
    expected = not patterns or any(fnmatch.fnmatchcase(key, p) for p in patterns)
    assert KeyFilter(patterns).accepts(key.encode()) == expected


@given(
    prefix=st.text(alphabet=printable_without_bracket, max_size=5).filter(
        lambda text: "*" not in text and "?" not in text
    ),
    key=st.binary(max_size=10),
)
def test_prefix_fast_path_agrees_with_general_matcher(prefix: str, key: bytes) -> None:
    pattern = prefix + "*"
    assert KeyFilter([pattern]).accepts(key) == glob_match(pattern.encode(), key)


def test_docstring_examples_run() -> None:
    results = doctest.testmod(filters_module)
    assert results.attempted > 0 and results.failed == 0
