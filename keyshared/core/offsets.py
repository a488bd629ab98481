"""Commit-metadata codec: the finished offsets above the committed cursor, as a short string.

Why: the committed offset can only say "everything below here is done". With key-parallel
processing, many offsets above the cursor are often already finished when a member stops (a slow
key holds the cursor back). Kafka lets a commit carry a metadata string next to the offset, so we
put those finished offsets there; after a restart or a hand-over the new owner skips them instead
of processing them twice. The metadata is only ever an optimisation: when it is missing, foreign,
damaged or too large, the reader treats nothing above the cursor as finished and reprocesses it,
which keeps at-least-once intact. That is why decoding never raises and why encoding gives up
(returns ``None``) instead of truncating.

Format: ``"ks1:" + base85(payload)``, where the payload is::

    version byte (1) | flags byte | zigzag varint base | body | CRC-32 of everything before it

``base`` is the cursor the set was encoded against, and offsets are stored relative to it, so a
reader given a later cursor can still use the metadata. The body is whichever is smaller of a run
list (varint pairs: gap before the run, run length - 1) and a bitset (bit ``i`` = offset
``base + 1 + i``), zlib-compressed when that helps; the flags byte says which. Kafka's
``offset.metadata.max.bytes`` defaults to 4096, so encoding targets 4000 by default.

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
from collections.abc import Iterable

__all__ = [
    "DEFAULT_MAX_BYTES",
    "METADATA_PREFIX",
    "decode_finished",
    "encode_finished",
    "is_keyshared_metadata",
]

METADATA_PREFIX = "ks1:"
"""Marks metadata written by keyshared, so another tool's metadata string is left alone."""

DEFAULT_MAX_BYTES = 4000
"""Kafka's ``offset.metadata.max.bytes`` is 4096 by default; keep a little headroom below it."""

_VERSION = 1
_KIND_RUNS = 0
_KIND_BITSET = 1
_KIND_MASK = 0x03
_COMPRESSED = 0x80
_CRC_BYTES = 4

# Limits on what a decoder will expand, so a crafted or damaged string cannot exhaust memory. A
# real window holds far fewer finished offsets than this; the encoder never produces more, and the
# decoder treats anything larger as foreign.
_MAX_BODY_BYTES = 1 << 20
_MAX_DECODED = 1 << 20


def encode_finished(
    cursor: int, finished: Iterable[int], max_bytes: int = DEFAULT_MAX_BYTES
) -> str | None:
    """Encode the offsets in ``finished`` that are strictly above ``cursor``.

    :param cursor: the offset being committed (the next one to consume, itself unfinished).
    :param finished: finished offsets; those ``<= cursor`` are ignored, duplicates are fine.
    :param max_bytes: the longest string the caller can commit.
    :returns: the metadata string (``""`` when nothing above the cursor is finished), or
        ``None`` when it cannot fit in ``max_bytes``; the caller then commits the plain cursor.
    """
    offsets = sorted({offset for offset in finished if offset > cursor})
    if not offsets:
        return ""
    if len(offsets) > _MAX_DECODED:
        return None
    runs = _encode_runs(cursor, offsets)
    candidates = [(_KIND_RUNS, runs)]
    span_bytes = (offsets[-1] - cursor + 7) // 8
    # A bitset whose raw size is far above the run list's can only win on extremely regular
    # data that compresses as well in run form, so it is not worth allocating.
    if span_bytes <= 4 * len(runs):
        candidates.append((_KIND_BITSET, _encode_bitset(cursor, offsets, span_bytes)))
    options: list[tuple[int, int, bytes]] = []
    for kind, raw in candidates:
        options.append((len(raw), kind, raw))
        if len(raw) <= _MAX_BODY_BYTES:
            packed = zlib.compress(raw, 9)
            options.append((len(packed), kind | _COMPRESSED, packed))
    _, flags, body = min(options, key=lambda option: option[0])
    payload = bytearray((_VERSION, flags))
    _put_varint(payload, _zigzag(cursor))
    payload += body
    payload += zlib.crc32(payload).to_bytes(_CRC_BYTES, "little")
    text = METADATA_PREFIX + base64.b85encode(bytes(payload)).decode("ascii")
    return text if len(text) <= max_bytes else None


def decode_finished(cursor: int, metadata: str | None) -> frozenset[int]:
    """Return the finished offsets above ``cursor`` recorded in ``metadata``.

    Never raises: empty, foreign (another tool's) or damaged metadata gives an empty set, as does
    metadata encoded against a *later* cursor than ``cursor`` (the group was rewound, so the
    operator wants those offsets processed again).
    """
    if not isinstance(metadata, str) or not metadata.startswith(METADATA_PREFIX):
        return frozenset()
    try:
        decoded = _decode(cursor, metadata)
    except Exception:
        return frozenset()
    return decoded


def is_keyshared_metadata(metadata: str | None) -> bool:
    """Whether ``metadata`` looks like keyshared's (by prefix; content is checked on decode)."""
    return isinstance(metadata, str) and metadata.startswith(METADATA_PREFIX)


def _decode(cursor: int, metadata: str) -> frozenset[int]:
    payload = base64.b85decode(metadata[len(METADATA_PREFIX) :])
    if len(payload) < 2 + 1 + _CRC_BYTES or payload[0] != _VERSION:
        return frozenset()
    content, crc = payload[:-_CRC_BYTES], payload[-_CRC_BYTES:]
    if zlib.crc32(content).to_bytes(_CRC_BYTES, "little") != crc:
        return frozenset()
    flags = content[1]
    zigzag_base, position = _get_varint(content, 2)
    base = _unzigzag(zigzag_base)
    if cursor < base:
        return frozenset()
    body = content[position:]
    if flags & _COMPRESSED:
        inflater = zlib.decompressobj()
        body = inflater.decompress(body, _MAX_BODY_BYTES)
        if inflater.unconsumed_tail or not inflater.eof:
            return frozenset()
    kind = flags & _KIND_MASK
    if kind == _KIND_RUNS:
        offsets = _decode_runs(base, body)
    elif kind == _KIND_BITSET:
        offsets = _decode_bitset(base, body)
    else:
        return frozenset()
    if cursor > base:
        return frozenset(offset for offset in offsets if offset > cursor)
    return frozenset(offsets)


def _encode_runs(base: int, offsets: list[int]) -> bytes:
    out = bytearray()
    # The first run may start right after the base; later runs are at least one offset apart,
    # so their gap is stored minus one.
    expected = base + 1
    run_start = previous = offsets[0]
    for offset in offsets[1:]:
        if offset != previous + 1:
            _put_varint(out, run_start - expected)
            _put_varint(out, previous - run_start)
            expected = previous + 2
            run_start = offset
        previous = offset
    _put_varint(out, run_start - expected)
    _put_varint(out, previous - run_start)
    return bytes(out)


def _decode_runs(base: int, body: bytes) -> list[int]:
    offsets: list[int] = []
    expected = base + 1
    position = 0
    while position < len(body):
        gap, position = _get_varint(body, position)
        length_minus_one, position = _get_varint(body, position)
        if len(offsets) + length_minus_one + 1 > _MAX_DECODED:
            raise ValueError("too many offsets")
        start = expected + gap
        offsets.extend(range(start, start + length_minus_one + 1))
        expected = start + length_minus_one + 2
    return offsets


def _encode_bitset(base: int, offsets: list[int], span_bytes: int) -> bytes:
    bits = bytearray(span_bytes)
    first = base + 1
    for offset in offsets:
        index = offset - first
        bits[index >> 3] |= 1 << (index & 7)
    return bytes(bits)


def _decode_bitset(base: int, body: bytes) -> list[int]:
    if int.from_bytes(body, "little").bit_count() > _MAX_DECODED:
        raise ValueError("too many offsets")
    first = base + 1
    offsets: list[int] = []
    for byte_index, byte in enumerate(body):
        if byte:
            bit_base = first + (byte_index << 3)
            offsets.extend(bit_base + bit for bit in range(8) if byte >> bit & 1)
    return offsets


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
