"""Cursor arithmetic of ``key_shared`` members: what to write for a range, where to start.

Kept apart from :mod:`keyshared.modes.key_shared`, which decides *when* (on which assignment
change, after which drain); this module only computes offsets, from the member's window, the
stored cursors and the group's Kafka offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from coordinator.cursors import Cursor
from keyshared.core.claims import PartitionClaims, StoredCursor
from keyshared.core.offsets import decode_finished, encode_within
from keyshared.core.runs import EMPTY_RUNS, OffsetRuns
from keyshared.core.slots import MAX_SLOT, SlotRange
from keyshared.core.types import TP
from keyshared.errors import ConfigurationError, KeySharedError
from keyshared.kafka.kafka_consumer import KafkaConsumer

__all__ = [
    "Decoded",
    "cursors_for",
    "describe_claims",
    "low_watermarks",
    "metadata_budget",
    "partitions_of",
    "stored_cursors",
    "token_lookup",
]

log = logging.getLogger(__name__)

CURSOR_METADATA_BYTES = 60_000
"""The most metadata one cursor carries: well under ZooKeeper's 1 MB znode limit."""
RANGE_METADATA_BYTES = 384_000
"""The most metadata one range's cursors carry in one flush, all partitions together: a range's
cursors go in one ``multi`` (``coordinator.cursors.MAX_TRANSACTION_BYTES``), which must fit
ZooKeeper's ~1 MB request limit whole, or the write fails every flush and the range can never
be handed back. Shared out per partition (and per piece)."""
_RESET_TO_END = ("latest", "end", "largest")
_LEAST_METADATA_BYTES = 256  # a few runs: below it a cursor names only its offset


Decoded = dict[tuple[SlotRange, str, int], tuple[int, str, OffsetRuns]]
"""A member's decoded cursors of its last read: (range, topic, partition) -> (offset,
metadata, finished offsets)."""


def stored_cursors(
    cursors: Iterable[Cursor], previous: Decoded | None = None, keep: Decoded | None = None
) -> dict[TP, list[StoredCursor]]:
    """The coordinator's cursors per partition, with their finished offsets decoded.

    Decoding is the costly part of a member's re-read (tens of milliseconds for a cursor that
    carries thousands of finished offsets, and a group keeps one per range shape it has seen),
    and most cursors do not change between two reads: those found unchanged in ``previous``
    are not decoded again. ``keep`` receives this read's decodings, for the next one.
    """
    stored: dict[TP, list[StoredCursor]] = {}
    for cursor in cursors:
        where = (cursor.slots, cursor.topic, cursor.partition)
        known = previous.get(where) if previous is not None else None
        if known is not None and known[0] == cursor.offset and known[1] == cursor.metadata:
            finished = known[2]
        else:
            finished = decode_finished(cursor.offset, cursor.metadata)
        if keep is not None:
            keep[where] = (cursor.offset, cursor.metadata, finished)
        stored.setdefault((cursor.topic, cursor.partition), []).append(
            StoredCursor(cursor.slots, cursor.offset, cursor.token, finished, cursor.version)
        )
    return stored


def low_watermarks(cursors: Iterable[Cursor]) -> list[TopicPartition]:
    """Per partition, the lowest resume point over the whole slot space (partitions where some
    slot has no cursor yet are left out: their low point is not known)."""
    offsets = []
    for (topic, partition), stored in stored_cursors(cursors).items():
        claims = PartitionClaims.resolve([(SlotRange(0, MAX_SLOT), 0)], stored, base=-1)
        low = claims.start
        if low is not None and low >= 0 and all(p.start >= 0 for p in claims.pieces):
            offsets.append(TopicPartition(topic, partition, low))
    return offsets


def cursors_for(
    slots: SlotRange,
    claims: PartitionClaims | None,
    window_cursor: int,
    finished: Iterable[int],
    seen_end: int,
    metadata_bytes: int = CURSOR_METADATA_BYTES,
) -> list[tuple[SlotRange, int, str]] | None:
    """The cursor(s) of one range in one partition, from the member's window, as
    ``(slots, offset, metadata)``: one for the whole range, or one per piece of it. None when
    the window does not read the range yet (its stored cursors then stand).

    Every record below the window's cursor is done, and so is every record of a piece below
    the piece's resume point (earlier holders did them): a cursor is the higher of the two, so
    a freshly gained range never moves back. Finished offsets above it (the window's, and those
    the piece carried over) travel in the metadata.

    A range whose lease was just granted is not in the claims the window was built from until
    the member re-reads from the cursors: writing the window's cursor for it then would move
    the range back to wherever this member's other ranges stand, and its next owner would
    redo everything since.

    :param seen_end: one past the highest offset the window has taken in
        (:attr:`keyshared.core.window.InFlightWindow.seen_end`).
    :param metadata_bytes: the most metadata this partition's cursor(s) of the range carry
        (:func:`metadata_budget`); finished offsets past it are at most redone.
    """
    finished = OffsetRuns.coerce(finished)
    pieces = [] if claims is None else [p for p in claims.pieces if p.slots.overlaps(slots)]
    if not pieces or not _covers(pieces, slots):
        # Some slots of the range were not this member's when its window was built: the
        # window counted their records as finished (not its own), and a cursor written from it
        # would have the range's next owner skip them. Found by the 30-minute chaos run: a
        # range granted next to one already held (the plan's boundaries move) was written from
        # the old window and 2,545 records were never run.
        return None
    floor = max(window_cursor, min(p.start for p in pieces))
    if len(pieces) == 1 or seen_end >= _known_until(pieces, floor):
        # One piece, or the window has taken in everything its pieces know: the window's
        # own account (each record judged by its own slot's piece) is the whole truth.
        carried = pieces[0].finished if len(pieces) == 1 else EMPTY_RUNS
        return [(slots, *_cursor(floor, finished, carried, metadata_bytes))]
    # The range resumes at different points for different slots (it was put together from
    # ranges held before), and one offset plus finished offsets cannot say "done for these
    # slots, not for those" above what the window has taken in. Each piece can: write one
    # cursor per piece until the window gets there. Found by the 30-minute chaos run: a
    # member's range grew by one slot that resumed lower, it wrote the grown range's cursor at
    # that lower point before its window got there, and the next re-read ran again 25 records
    # it had finished two seconds before.
    share = max(_LEAST_METADATA_BYTES, metadata_bytes // len(pieces))
    return [
        (piece.slots, *_cursor(max(window_cursor, piece.start), finished, piece.finished, share))
        for piece in pieces
    ]


def metadata_budget(partitions: int) -> int:
    """Metadata bytes for each of a range's ``partitions`` cursors in one flush."""
    share = RANGE_METADATA_BYTES // max(1, partitions)
    return max(_LEAST_METADATA_BYTES, min(CURSOR_METADATA_BYTES, share))


def _cursor(
    floor: int, finished: OffsetRuns, carried: OffsetRuns, metadata_bytes: int
) -> tuple[int, str]:
    """The offset and metadata saying "done below ``floor``, and at these offsets above".

    A stored cursor's finished offsets (``carried``) are only true for records of its own
    slots: its writer also counted as "done" the records of slots it did not own. Carried
    into a cursor of a wider range they would claim other slots' records done and lose them
    (found by the join/leave/crash test in CI): only a piece's own cursor carries them.
    """
    done = finished.from_floor(floor) | carried.from_floor(floor)
    # The cursor names the first record *not* done, and the metadata holds only offsets above
    # it: a finished record at the floor (typically the resume point of a piece, finished by
    # this member since) must move the cursor on, or it is dropped and its next owner redoes
    # it (found by the chaos run).
    floor = done.run_end(floor)
    done = done.from_floor(floor + 1)
    if not done:
        return floor, ""
    return floor, encode_within(floor, done, metadata_bytes).text


def _known_until(pieces: list[Any], floor: int) -> int:
    """One past the highest offset at or above ``floor`` that some piece knows to be done."""
    known = floor
    for piece in pieces:
        known = max(known, piece.start)
        last = piece.finished.last
        if last is not None and last >= floor:
            known = max(known, last + 1)
    return known


def describe_claims(claims: dict[TP, PartitionClaims]) -> str:
    """Every piece, with where it resumes and whose cursor it resumes from (diagnostics)."""
    return "; ".join(
        f"{topic}[{partition}]: "
        + " ".join(f"{p.slots}@{p.start}+{len(p.finished)}/t{p.source}" for p in c.pieces)
        for (topic, partition), c in sorted(claims.items())
    )


def _covers(pieces: list[Any], slots: SlotRange) -> bool:
    """Whether the pieces' slots (sorted or not) cover every slot of ``slots``."""
    reach = slots.lo
    for piece in sorted(pieces, key=lambda p: p.slots.lo):
        if piece.slots.lo > reach:
            return False
        reach = max(reach, piece.slots.hi + 1)
        if reach > slots.hi:
            return True
    return reach > slots.hi


def token_lookup(
    claims: PartitionClaims, slot: Callable[[bytes | None, int], int]
) -> Callable[[bytes | None, int], int | None]:
    """The fencing token of a record: its range's lease token (set on each record's Record)."""
    return lambda key, offset: claims.token_of(slot(key, offset))


def partitions_of(consumer: KafkaConsumer, topics: list[str], timeout: float) -> list[TP]:
    """Every partition of ``topics``; a missing topic is an error naming it."""
    found: list[TP] = []
    for topic in topics:
        try:
            metadata = consumer.list_topics(topic, timeout=timeout)
        except KafkaException as exc:
            raise KeySharedError(f"listing the partitions of {topic!r} failed: {exc}") from None
        described = metadata.topics.get(topic)
        if described is None or described.error is not None or not described.partitions:
            raise ConfigurationError(
                "topics", f"topic {topic!r} does not exist (key_shared reads every partition)"
            )
        found.extend((topic, p) for p in sorted(described.partitions))
    return found
