"""Commit-metadata codec: the finished offsets above the committed cursor, as a short string.

Why: the committed offset can only say "everything below here is done". With key-parallel
processing, many offsets above the cursor are often already finished when a member stops (a slow
key holds the cursor back). Kafka lets a commit carry a metadata string next to the offset, so we
put those finished offsets there; after a restart or a hand-over the new owner skips them instead
of processing them twice. The metadata is only ever an optimisation: when it is missing, foreign,
damaged or too large, the reader treats nothing above the cursor as finished and reprocesses it,
which keeps at-least-once intact. That is why decoding never raises, and why an encoding that
does not fit keeps only the runs nearest the cursor (:func:`encode_within`: a subset of what is
finished is always true; what it leaves out is counted so the caller can say so).

Finished offsets travel as runs end to end: the window computes them as runs, the encoder writes
runs, the decoder returns :class:`~keyshared.core.runs.OffsetRuns`. One stuck record with 200,000
finished offsets above it is one run: a few bytes, not a list of 200,000 ints.

Format: ``"ks1:" + base85(payload)``, where the payload is::

    version byte (1) | flags byte | zigzag varint base | body | CRC-32 of everything before it

``base`` is the cursor the set was encoded against, and offsets are stored relative to it, so a
reader given a later cursor can still use the metadata. Version 2 (:func:`encode_linked`) adds a
varint *link* after the base: the offset of a record elsewhere (exactly-once's side record, see
:mod:`keyshared.kafka.finished_sets`) that holds the whole finished set when it does not fit here;
the body then names the runs nearest the cursor, as version 1 does when it overflows. A version 1
reader decodes version 2 as empty (it redoes, which is always safe).

The body is whichever is smaller of a run list (varint pairs: gap before the run, run
length - 1) and a bitset (bit ``i`` = offset ``base + 1 + i``), zlib-compressed when that helps;
the flags byte says which. Kafka's
``offset.metadata.max.bytes`` defaults to 4096, so encoding targets 4000 by default.

A commit may end in an *incarnation stamp*, ``"," + topic id`` (:func:`stamp_incarnation`):
the id of the topic whose log the cursor counts. A topic deleted and created again under its
name keeps its name and gets a new id, and Kafka takes an offset committed for the old log on
the new one; the stamp lets the next owner tell (:func:`incarnation_of`) and read the new log
from its start rather than from an offset of a log that is gone. ``,`` is outside base85's
alphabet and outside base64's (confluent-kafka prints topic ids in standard base64, ``+`` and
``/`` included), so the stamp never meets the payload or the id; a reader that predates it
finds no valid payload and redoes, which is safe.

Example::

    >>> text = encode_finished(100, [102, 103, 104, 110])
    >>> is_keyshared_metadata(text)
    True
    >>> sorted(decode_finished(100, text))
    [102, 103, 104, 110]
    >>> sorted(decode_finished(103, text))
    [104, 110]
"""

from __future__ import annotations

import base64
import zlib
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from keyshared.core.runs import EMPTY_RUNS, OffsetRuns

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_RUNS",
    "METADATA_PREFIX",
    "Encoded",
    "decode_finished",
    "encode_finished",
    "encode_linked",
    "encode_monotone",
    "encode_whole",
    "encode_within",
    "incarnation_of",
    "is_keyshared_metadata",
    "linked_record",
    "stamp_incarnation",
    "without_incarnation",
]

METADATA_PREFIX = "ks1:"
"""Marks metadata written by keyshared, so another tool's metadata string is left alone."""

DEFAULT_MAX_BYTES = 4000
"""Kafka's ``offset.metadata.max.bytes`` is 4096 by default; keep a little headroom below it."""

INCARNATION_SEPARATOR = ","
"""Between the payload and a topic id (:func:`stamp_incarnation`): neither a base85 nor a
base64 character."""

_VERSION = 1
_VERSION_LINKED = 2
_KIND_RUNS = 0
_KIND_BITSET = 1
_KIND_MASK = 0x03
_COMPRESSED = 0x80
_CRC_BYTES = 4

# Limits on what a decoder will expand, so a crafted or damaged string cannot exhaust memory. The
# decoder keeps runs, never one int per offset, so a run may be as long as it likes; the number of
# runs is what costs memory. The encoders keep to the same limits: a text the decoder refuses
# would name nothing, and a reader would redo records whose outputs are committed. Runs are
# finished stretches between unfinished or absent offsets (an upstream transaction's marker is
# one): behind a key blocked for hours on a transactional input they can pass the limit.
_MAX_BODY_BYTES = 1 << 20
_MAX_RUNS = 1 << 18
MAX_RUNS = _MAX_RUNS
"""The most runs a text names: encoders name no more, decoders refuse more."""
_MAX_OFFSET = (1 << 63) - 1  # Kafka offsets are signed 64-bit


def encode_finished(
    cursor: int, finished: Iterable[int], max_bytes: int = DEFAULT_MAX_BYTES
) -> str | None:
    """Encode the offsets in ``finished`` that are strictly above ``cursor``.

    :param cursor: the offset being committed (the next one to consume, itself unfinished).
    :param finished: finished offsets (an :class:`OffsetRuns` is taken as runs, without
        expanding it); those ``<= cursor`` are ignored, duplicates are fine.
    :param max_bytes: the longest string the caller can commit.
    :returns: the metadata string (``""`` when nothing above the cursor is finished), or
        ``None`` when it cannot fit in ``max_bytes``; the caller then commits the plain cursor.
    """
    encoded = encode_within(cursor, finished, max_bytes)
    return encoded.text if not encoded.left_out else None


class Encoded(NamedTuple):
    """Metadata that fits, and how many finished offsets it had to leave out to fit."""

    text: str
    left_out: int


def encode_within(
    cursor: int, finished: Iterable[int], max_bytes: int = DEFAULT_MAX_BYTES
) -> Encoded:
    """Encode as many finished offsets above ``cursor`` as fit in ``max_bytes``.

    When all of them do not fit, the runs nearest the cursor are kept: they are the ones the
    cursor reaches first, and what is left out is only redone after a crash, never lost (the
    metadata always names a subset of what is finished). ``left_out`` says how many offsets
    that costs, for the metric and the log line. Two commits may name different subsets:
    where a named offset must stay named (its outputs are committed), use
    :func:`encode_monotone`.
    """
    runs, whole = _above_cursor(cursor, finished, max_bytes)
    if whole is not None:
        return whole
    return _nearest_runs(cursor, runs, max_bytes)


def _above_cursor(
    cursor: int, finished: Iterable[int], max_bytes: int
) -> tuple[OffsetRuns, Encoded | None]:
    """The finished runs above ``cursor``, with their whole encoding when it fits: both
    encoders send everything when they can, and differ only in what they keep when they
    cannot."""
    runs = OffsetRuns.coerce(finished).from_floor(cursor + 1)
    if not runs:
        return runs, Encoded("", 0)
    if len(runs.runs) > _MAX_RUNS:  # it may compress into max_bytes, but no reader takes it
        return runs, None
    text = _encode_runs_text(cursor, runs.runs)
    return runs, (Encoded(text, 0) if len(text) <= max_bytes else None)


def _nearest_runs(
    cursor: int, runs: OffsetRuns, max_bytes: int, link: int | None = None
) -> Encoded:
    """The runs nearest the cursor that fit, for ``runs`` whose whole encoding does not."""
    all_runs = runs.runs
    budget = _raw_budget(max_bytes) - (0 if link is None else _varint_len(link))
    count = used = 0
    expected = cursor + 1
    for start, end in all_runs:
        used += _varint_len(start - expected) + _varint_len(end - 1 - start)
        if used > budget:
            break
        count += 1
        expected = end + 1
    fitted = _fit(cursor, len(all_runs), lambda j: all_runs[:j], count, max_bytes, link)
    if fitted is None and link is not None:
        fitted = (0, _encode_runs_text(cursor, (), link))
    best_count, best = fitted or (0, "")
    kept = sum(end - start for start, end in all_runs[:best_count])
    return Encoded(best, len(runs) - kept)


def encode_whole(cursor: int, finished: Iterable[int], max_bytes: int) -> str | None:
    """Every finished offset above ``cursor``: the value of a side record, which has no
    metadata budget (runs keep it short: 200,000 finished offsets behind one stuck record are
    a few bytes). ``""`` when nothing above the cursor is finished.

    ``None`` when the whole set cannot be written as one readable record: more than
    :data:`MAX_RUNS` runs (a decoder would refuse it and name nothing), or longer than
    ``max_bytes`` (the broker would refuse the record). Never a part of the set: a side
    record that named less than the last one could un-name committed records. The caller
    names less in a way that keeps what it named (see the exactly-once committer)."""
    runs = OffsetRuns.coerce(finished).from_floor(cursor + 1)
    if len(runs.runs) > _MAX_RUNS:
        return None
    text = _encode_runs_text(cursor, runs.runs)
    return text if len(text) <= max_bytes else None


def encode_linked(
    cursor: int, finished: Iterable[int], link: int, max_bytes: int = DEFAULT_MAX_BYTES
) -> Encoded:
    """Metadata that points at a record holding the whole finished set (``link``: its offset
    in the side topic), and names the runs nearest the cursor as far as they fit.

    Why the runs too: a tool that reads only the commit (``keyshared status``, an older
    reader's redo) still sees the nearest part; the owner that resumes reads the side record.
    ``left_out`` counts what only the side record names.
    """
    if link < 0:
        raise ValueError(f"a link is a record offset, not {link}")
    runs = OffsetRuns.coerce(finished).from_floor(cursor + 1)
    return _nearest_runs(cursor, runs, max_bytes, link)


def encode_monotone(
    cursor: int, finished: Iterable[int], previous: str, max_bytes: int = DEFAULT_MAX_BYTES
) -> Encoded:
    """Encode the finished offsets above ``cursor`` without un-naming any ``previous`` named.

    Why: once a commit named an offset, whatever was committed with it (exactly-once outputs)
    is final, and a later commit that leaves the offset out would have the next owner redo the
    record and commit its outputs a second time. So the offsets ``previous`` names above
    ``cursor`` (and that are finished: a rewound group's old metadata names nothing) are all
    kept, and the other finished runs are added nearest the cursor first, as many as fit;
    ``left_out`` counts the finished offsets not named. When not even the previous set fits
    re-encoded against ``cursor``, ``previous`` itself is returned: it was committed once, and
    a reader decodes it against any later cursor. Either may be longer than ``max_bytes`` (a
    ``previous`` read back from a side record): the caller then writes a side record or keeps
    its last commit, never a smaller set.

    Per key the named set stays a prefix of the key's records (records of a key finish in
    order, and the union of two prefixes is one), so outputs released as their records get
    named go out in key order.
    """
    runs, whole = _above_cursor(cursor, finished, max_bytes)
    if whole is not None:
        return whole
    decoded = decode_finished(cursor, previous)
    named = decoded & runs
    if not named:
        return _nearest_runs(cursor, runs, max_bytes)
    all_runs = runs.runs
    kept_runs = named.runs
    kept_starts = [start for start, _ in kept_runs]

    def tail(j: int) -> int:
        """Candidate j is all_runs[:j] + kept_runs[tail(j):]: the named offsets beyond the
        first j finished runs (a named run lies inside a finished one, never across its end)."""
        return bisect_left(kept_starts, all_runs[j - 1][1]) if j else 0

    # Uncompressed cost of each candidate; kept runs after the first cost the same in every
    # candidate (their gaps are to each other), so they are suffix-summed once.
    suffix = [0] * (len(kept_runs) + 1)
    for i in range(len(kept_runs) - 1, 0, -1):
        start, end = kept_runs[i]
        gap = start - kept_runs[i - 1][1] - 1
        suffix[i - 1] = suffix[i] + _varint_len(gap) + _varint_len(end - 1 - start)
    budget = _raw_budget(max_bytes)
    sure = -1
    prefix = 0
    expected = cursor + 1
    for j in range(len(all_runs) + 1):
        if j:
            start, end = all_runs[j - 1]
            prefix += _varint_len(start - expected) + _varint_len(end - 1 - start)
            if prefix > budget:
                break  # every later candidate costs at least this much uncompressed
            expected = end + 1
        cost = prefix
        t = tail(j)
        if t < len(kept_runs):
            start, end = kept_runs[t]
            cost += _varint_len(start - expected) + _varint_len(end - 1 - start) + suffix[t]
        if cost <= budget:
            sure = j
    fitted = _fit(
        cursor, len(all_runs), lambda j: all_runs[:j] + kept_runs[tail(j) :], sure, max_bytes
    )
    if fitted is None:
        if len(named) == len(decoded):
            return Encoded(previous, len(runs) - len(named))
        # previous names offsets that are no longer finished (a compacted input's gap: the
        # record is gone, never to run again): what it names that is still finished must stay
        # named, and it does not fit either. Return it whole, over budget: the caller puts it
        # in a side record or holds the partition; naming only the nearest runs would un-name
        # committed records. When the gaps split it past what a reader takes, previous itself
        # goes again: it decodes, and what it names beyond ``named`` are those gaps, which are
        # never delivered, so naming them skips nothing.
        if len(named.runs) > _MAX_RUNS:
            return Encoded(previous, len(runs) - len(named))
        return Encoded(_encode_runs_text(cursor, named.runs), len(runs) - len(named))
    best_count, best = fitted
    kept = sum(end - start for start, end in all_runs[:best_count])
    kept += sum(end - start for start, end in kept_runs[tail(best_count) :])
    return Encoded(best, len(runs) - kept)


def _raw_budget(max_bytes: int) -> int:
    """Body bytes that surely fit uncompressed: base85 turns 4 bytes into 5; header and CRC
    take at most 16."""
    return (max_bytes - len(METADATA_PREFIX)) * 4 // 5 - 16


def _fit(
    cursor: int,
    count: int,
    candidate: Callable[[int], Sequence[tuple[int, int]]],
    sure: int,
    max_bytes: int,
    link: int | None = None,
) -> tuple[int, str] | None:
    """The largest ``j`` (of a handful tried) whose ``candidate(j)`` encodes within
    ``max_bytes``, with its text; ``sure`` fits uncompressed (-1: none is known to).

    Starts from ``sure`` and tries a few larger ``j``, since compression often packs more. A
    handful of encodings, not a search: this runs on the poll thread at every commit while a
    deep window overflows. Candidates grow with ``j``.
    """
    best: tuple[int, str] | None = None
    start = max(sure, 0)
    runs = candidate(start)
    text = _encode_runs_text(cursor, runs, link)
    if len(text) <= max_bytes and len(runs) <= _MAX_RUNS:  # by _raw_budget, for sure >= 0
        best = (start, text)
    for factor in (4, 2, 1.5):
        more = int(max(start, 1) * factor)
        if more <= start or more >= count or (best is None and more > 1):
            continue
        runs = candidate(more)
        if len(runs) > _MAX_RUNS:
            continue
        candidate_text = _encode_runs_text(cursor, runs, link)
        if len(candidate_text) <= max_bytes:
            best = (more, candidate_text)
            break
    return best


def _varint_len(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _encode_runs_text(cursor: int, runs: Sequence[tuple[int, int]], link: int | None = None) -> str:
    if not runs and link is None:
        return ""
    body_runs = _encode_runs(cursor, runs)
    candidates = [(_KIND_RUNS, body_runs)]
    span_bytes = (runs[-1][1] - 1 - cursor + 7) // 8 if runs else 0
    # A bitset whose raw size is far above the run list's can only win on extremely regular
    # data that compresses as well in run form, so it is not worth allocating.
    if span_bytes <= 4 * len(body_runs):
        candidates.append((_KIND_BITSET, _encode_bitset(cursor, runs, span_bytes)))
    options: list[tuple[int, int, bytes]] = []
    for kind, raw in candidates:
        options.append((len(raw), kind, raw))
        if len(raw) <= _MAX_BODY_BYTES:
            packed = zlib.compress(raw, 6)  # 9 took 2-3x longer for a few bytes
            options.append((len(packed), kind | _COMPRESSED, packed))
    _, flags, body = min(options, key=lambda option: option[0])
    payload = bytearray((_VERSION if link is None else _VERSION_LINKED, flags))
    _put_varint(payload, _zigzag(cursor))
    if link is not None:
        _put_varint(payload, link)
    payload += body
    payload += zlib.crc32(payload).to_bytes(_CRC_BYTES, "little")
    return METADATA_PREFIX + base64.b85encode(bytes(payload)).decode("ascii")


def decode_finished(cursor: int, metadata: str | None) -> OffsetRuns:
    """Return the finished offsets above ``cursor`` recorded in ``metadata``.

    Never raises: empty, foreign (another tool's) or damaged metadata gives an empty set, as does
    metadata encoded against a *later* cursor than ``cursor`` (the group was rewound, so the
    operator wants those offsets processed again).
    """
    if not isinstance(metadata, str) or not metadata.startswith(METADATA_PREFIX):
        return EMPTY_RUNS
    try:
        decoded = _decode(cursor, metadata)
    except Exception:
        return EMPTY_RUNS
    return decoded


def is_keyshared_metadata(metadata: str | None) -> bool:
    """Whether ``metadata`` looks like keyshared's (by prefix; content is checked on decode)."""
    return isinstance(metadata, str) and metadata.startswith(METADATA_PREFIX)


def stamp_incarnation(metadata: str, topic_id: str) -> str:
    """``metadata`` (keyshared's, or empty) marked as counting the log of the topic whose id is
    ``topic_id``; unchanged without an id. The stamp takes ``1 + len(topic_id)`` characters
    (23 for Kafka's ids) of the headroom below ``offset.metadata.max.bytes``.

    Raises ValueError for another tool's metadata or an id that holds the separator."""
    if not topic_id:
        return metadata
    if INCARNATION_SEPARATOR in topic_id or any(c.isspace() for c in topic_id):
        raise ValueError(f"not a topic id: {topic_id!r}")
    if metadata and not is_keyshared_metadata(metadata):
        raise ValueError(f"not keyshared's commit metadata: {metadata[:40]!r}")
    body = (metadata or METADATA_PREFIX).partition(INCARNATION_SEPARATOR)[0]
    return f"{body}{INCARNATION_SEPARATOR}{topic_id}"


def incarnation_of(metadata: str | None) -> str | None:
    """The topic id ``metadata`` was stamped with; None for unstamped or foreign metadata
    (its offset may belong to any incarnation: it is trusted, as before stamps)."""
    if not is_keyshared_metadata(metadata):
        return None
    return str(metadata).partition(INCARNATION_SEPARATOR)[2] or None


def without_incarnation(metadata: str) -> str:
    """``metadata`` without its incarnation stamp; "" when the stamp was all of it (a cursor
    with no finished offsets above it)."""
    if not is_keyshared_metadata(metadata):
        return metadata
    body = metadata.partition(INCARNATION_SEPARATOR)[0]
    return "" if body == METADATA_PREFIX and body != metadata else body


def _checked(metadata: str) -> bytes | None:
    """The payload of ``metadata`` without its CRC, or None when it is not one (damaged,
    foreign version)."""
    text = metadata[len(METADATA_PREFIX) :].partition(INCARNATION_SEPARATOR)[0]
    payload = base64.b85decode(text)
    if len(payload) < 2 + 1 + _CRC_BYTES or payload[0] not in (_VERSION, _VERSION_LINKED):
        return None
    content, crc = payload[:-_CRC_BYTES], payload[-_CRC_BYTES:]
    if zlib.crc32(content).to_bytes(_CRC_BYTES, "little") != crc:
        return None
    return content


def linked_record(metadata: str | None) -> int | None:
    """The link of version 2 metadata (see :func:`encode_linked`); None for any other string.
    Never raises."""
    if not is_keyshared_metadata(metadata):
        return None
    try:
        content = _checked(str(metadata))
        if content is None or content[0] != _VERSION_LINKED:
            return None
        _, position = _get_varint(content, 2)
        link, _ = _get_varint(content, position)
    except Exception:
        return None
    return link


def _decode(cursor: int, metadata: str) -> OffsetRuns:
    content = _checked(metadata)
    if content is None:
        return EMPTY_RUNS
    flags = content[1]
    zigzag_base, position = _get_varint(content, 2)
    base = _unzigzag(zigzag_base)
    if content[0] == _VERSION_LINKED:
        _, position = _get_varint(content, position)
    if cursor < base:
        return EMPTY_RUNS
    body = content[position:]
    if flags & _COMPRESSED:
        inflater = zlib.decompressobj()
        body = inflater.decompress(body, _MAX_BODY_BYTES)
        if inflater.unconsumed_tail or not inflater.eof:
            return EMPTY_RUNS
    kind = flags & _KIND_MASK
    if kind == _KIND_RUNS:
        runs = _decode_runs(base, body)
    elif kind == _KIND_BITSET:
        runs = _decode_bitset(base, body)
    else:
        return EMPTY_RUNS
    decoded = OffsetRuns.from_sorted_runs(runs)
    return decoded.from_floor(cursor + 1) if cursor > base else decoded


def _encode_runs(base: int, runs: Sequence[tuple[int, int]]) -> bytes:
    out = bytearray()
    # The first run may start right after the base; later runs are at least one offset apart,
    # so their gap is stored minus one.
    expected = base + 1
    for start, end in runs:
        _put_varint(out, start - expected)
        _put_varint(out, end - 1 - start)
        expected = end + 1
    return bytes(out)


def _decode_runs(base: int, body: bytes) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    expected = base + 1
    position = 0
    while position < len(body):
        gap, position = _get_varint(body, position)
        length_minus_one, position = _get_varint(body, position)
        if len(runs) >= _MAX_RUNS:
            raise ValueError("too many runs")
        start = expected + gap
        if start + length_minus_one >= _MAX_OFFSET:
            raise ValueError("run beyond Kafka's offset range")
        runs.append((start, start + length_minus_one + 1))
        expected = start + length_minus_one + 2
    return runs


def _encode_bitset(base: int, runs: Sequence[tuple[int, int]], span_bytes: int) -> bytes:
    # One big-int OR per run, not one Python step per offset: dense windows are the norm.
    bits = 0
    first = base + 1
    for start, end in runs:
        bits |= ((1 << (end - start)) - 1) << (start - first)
    return bits.to_bytes(span_bytes, "little")


def _decode_bitset(base: int, body: bytes) -> list[tuple[int, int]]:
    first = base + 1
    runs: list[tuple[int, int]] = []
    for byte_index, byte in enumerate(body):
        if byte == 0xFF and runs and runs[-1][1] == first + (byte_index << 3):
            runs[-1] = (runs[-1][0], runs[-1][1] + 8)  # the common case of a dense window
        elif byte:
            bit_base = first + (byte_index << 3)
            for bit in range(8):
                if byte >> bit & 1:
                    offset = bit_base + bit
                    if runs and runs[-1][1] == offset:
                        runs[-1] = (runs[-1][0], offset + 1)
                    else:
                        if len(runs) >= _MAX_RUNS:
                            raise ValueError("too many runs")
                        runs.append((offset, offset + 1))
    return runs


def _zigzag(value: int) -> int:
    return value * 2 if value >= 0 else -value * 2 - 1


def _unzigzag(value: int) -> int:
    return value >> 1 if not value & 1 else -((value + 1) >> 1)


def _put_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _get_varint(data: bytes, position: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("truncated or oversized varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
