"""Glob key filters: which message keys a consumer is willing to process.

A consumer may declare patterns such as ``payment*`` or ``eu-west-?``; records whose key matches
none of them are skipped and count as done. ``*`` matches any run of bytes (including none) and
``?`` exactly one byte; every other character, ``[`` included, is literal. Patterns are ``str``
and are compared against the key's bytes after UTF-8 encoding, so a ``?`` matches one byte, not
one multi-byte character.

Why not ``fnmatch`` or a regex: this runs once per record, and most real patterns are a literal
or a ``prefix*``. Those take a set lookup or one ``bytes.startswith`` call; patterns with ``*``
but no ``?`` are matched segment by segment with ``bytes.find``; only patterns with ``?`` go
through a small iterative backtracking matcher, after a length check. None of them can blow up
the way a backtracking regex can.

Example::

    >>> only_payments = KeyFilter(["payment*", "invoice"])
    >>> only_payments.accepts(b"payment-17"), only_payments.accepts(b"refund-17")
    (True, False)
    >>> only_payments.accepts(None), KeyFilter([]).accepts(None)
    (False, True)
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["KeyFilter", "glob_match"]

_STAR = ord("*")
_QUESTION = ord("?")


def glob_match(pattern: bytes, key: bytes) -> bool:
    """Whether ``key`` matches the glob ``pattern`` (``*`` and ``?`` only), both as bytes."""
    p = k = 0
    star = -1
    resume = 0
    pattern_length, key_length = len(pattern), len(key)
    while k < key_length:
        if p < pattern_length:
            char = pattern[p]
            if char == _STAR:
                # Remember the star and try matching it against nothing first.
                star, resume = p, k
                p += 1
                continue
            if char == _QUESTION or char == key[k]:
                p += 1
                k += 1
                continue
        if star < 0:
            return False
        # Mismatch after a star: let the star swallow one more byte and retry from there.
        resume += 1
        p, k = star + 1, resume
    while p < pattern_length and pattern[p] == _STAR:
        p += 1
    return p == pattern_length


class KeyFilter:
    """A set of glob patterns; a key is accepted when it matches at least one.

    No patterns, or any pattern made only of ``*``, accepts every key. A null key (``None``) is
    accepted only by such an accept-everything filter, since it cannot match a pattern; the empty
    key ``b""`` is an ordinary key (matched by ``""`` or ``*``).

    :param patterns: glob patterns as ``str``.
    """

    __slots__ = ("_accepts_all", "_globs", "_literals", "_patterns", "_prefixes", "_starred")

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        if isinstance(patterns, (str, bytes)):
            raise TypeError(f"patterns must be a list of str, not a single string: {patterns!r}")
        self._patterns: tuple[str, ...] = tuple(patterns)
        literals: set[bytes] = set()
        prefixes: list[bytes] = []
        starred: list[_Starred] = []
        globs: list[_Glob] = []
        accepts_all = not self._patterns
        for pattern in self._patterns:
            if not isinstance(pattern, str):
                raise TypeError(f"key filter patterns must be str, got {pattern!r}")
            encoded = _collapse_stars(pattern.encode("utf-8"))
            body = encoded.rstrip(b"*")
            if not body and encoded:
                accepts_all = True
            elif b"*" not in encoded and b"?" not in encoded:
                literals.add(encoded)
            elif b"*" not in body and b"?" not in body:
                prefixes.append(body)
            elif b"?" not in encoded:
                head, *middles, tail = encoded.split(b"*")
                literal_bytes = len(encoded) - encoded.count(b"*")
                starred.append((head, tuple(middles), tail, literal_bytes))
            else:
                fixed = len(encoded) - encoded.count(b"*")
                globs.append((fixed, b"*" in encoded, encoded))
        self._accepts_all = accepts_all
        self._literals = frozenset(literals)
        self._prefixes = tuple(prefixes)
        self._starred = tuple(starred)
        self._globs = tuple(globs)

    @property
    def patterns(self) -> tuple[str, ...]:
        """The patterns as given."""
        return self._patterns

    @property
    def accepts_all(self) -> bool:
        """Whether every key (and the null key) is accepted."""
        return self._accepts_all

    def accepts(self, key: bytes | None) -> bool:
        """Whether a record with this key is for this consumer."""
        if self._accepts_all:
            return True
        if key is None:
            return False
        if key in self._literals:
            return True
        if self._prefixes and key.startswith(self._prefixes):
            return True
        for head, middles, tail, fixed in self._starred:
            if _starred_match(key, head, middles, tail, fixed):
                return True
        size = len(key)
        for fixed, has_star, pattern in self._globs:
            # Length alone rules most keys out before the byte-by-byte matcher runs.
            if (size >= fixed if has_star else size == fixed) and glob_match(pattern, key):
                return True
        return False

    def __repr__(self) -> str:
        return f"KeyFilter({list(self._patterns)!r})"


# (head, middle segments, tail, number of literal bytes) of a pattern with ``*`` but no ``?``.
_Starred = tuple[bytes, tuple[bytes, ...], bytes, int]
# (bytes a key needs at least, whether a ``*`` allows more, pattern) of a pattern with ``?``.
_Glob = tuple[int, bool, bytes]


def _starred_match(
    key: bytes, head: bytes, middles: tuple[bytes, ...], tail: bytes, fixed: int
) -> bool:
    """Match a ``*``-only pattern: anchored head and tail, then each middle segment found
    leftmost in turn. Greedy leftmost search is exact when ``*`` is the only wildcard, and
    ``bytes.find`` does the scanning in C."""
    if len(key) < fixed or not key.startswith(head) or not key.endswith(tail):
        return False
    position, end = len(head), len(key) - len(tail)
    for segment in middles:
        found = key.find(segment, position, end)
        if found < 0:
            return False
        position = found + len(segment)
    return True


def _collapse_stars(pattern: bytes) -> bytes:
    """Replace runs of ``*`` by one ``*``: same language, less backtracking."""
    while b"**" in pattern:
        pattern = pattern.replace(b"**", b"*")
    return pattern
