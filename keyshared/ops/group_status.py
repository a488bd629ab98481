"""What an operator wants to know about a group, as plain data computed from plain facts.

Why pure: ``keyshared status`` and ``keyshared verify`` read the same facts (committed offset and
its metadata, watermarks, key states, DLQ sizes) and must agree on what they mean — above all on
which offsets are *not done*. Keeping that arithmetic here, free of clients, lets it be tested
without a broker and keeps the Kafka layer (:mod:`keyshared.ops.admin`) a thin reader.

"Not done" for a partition is every offset from the committed cursor up to the high watermark,
minus the finished offsets the commit metadata records above the cursor (see
:mod:`keyshared.core.offsets`). Some of those offsets may hold no record a consumer can see
(transaction markers, aborted or compacted records); :func:`refine_pending` narrows the ranges to
the offsets a read-committed reader actually found.

Example::

    >>> status = partition_status("orders", 0, committed=10, metadata=None, low=0, high=13)
    >>> status.lag, status.pending
    (3, ((10, 12),))
    >>> format_ranges(status.pending)
    '10..12'
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from keyshared.core.offsets import (
    decode_finished,
    is_keyshared_metadata,
    linked_record,
    without_incarnation,
)
from keyshared.core.runs import EMPTY_RUNS, OffsetRuns

__all__ = [
    "DlqTopic",
    "GroupInfo",
    "Member",
    "MetadataKind",
    "PartitionStatus",
    "StatusReport",
    "classify_metadata",
    "format_ranges",
    "offsets_to_ranges",
    "partition_status",
    "refine_pending",
]

MetadataKind = Literal["keyshared", "empty", "foreign", "undecodable"]
"""``keyshared``: decodes; ``empty``: none committed; ``foreign``: another tool's string;
``undecodable``: keyshared's prefix but damaged (the finished offsets above it will be redone)."""

OffsetRange = tuple[int, int]
"""Inclusive ``(first, last)`` offsets."""


@dataclass(frozen=True)
class PartitionStatus:
    """One partition of a consumed topic, seen from the group's committed offset.

    ``lag`` is Kafka's usual number (high watermark minus committed offset, or minus the log
    start when nothing is committed); ``pending`` is the part of it that is really not done.
    ``deleted_unconsumed`` counts offsets retention deleted before the group got to them.
    """

    topic: str
    partition: int
    committed: int | None
    low_watermark: int
    high_watermark: int
    lag: int
    finished_above_cursor: int
    metadata: MetadataKind
    pending: tuple[OffsetRange, ...]
    pending_count: int
    deleted_unconsumed: int = 0
    owner: str | None = None  # client id of the member the partition is assigned to

    @property
    def done(self) -> bool:
        """Every offset below the high watermark is finished (and none was lost to retention)."""
        return self.pending_count == 0 and self.deleted_unconsumed == 0


@dataclass(frozen=True)
class Member:
    """A member of the group as the group coordinator describes it."""

    member_id: str
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class GroupInfo:
    """The group's state as its coordinator sees it (``dead`` for a group it does not know)."""

    group: str
    state: str
    type: str
    assignor: str
    members: tuple[Member, ...]


@dataclass(frozen=True)
class DlqTopic:
    """A DLQ topic's size; ``by_source`` (verify only) counts this group's dead letters per
    source partition, read from the provenance headers."""

    topic: str
    source_topic: str
    exists: bool
    records: int = 0
    by_source: dict[int, int] | None = None


@dataclass
class StatusReport:
    """Everything ``keyshared status`` shows, JSON-ready through :func:`dataclasses.asdict`."""

    group: str
    info: GroupInfo
    partitions: list[PartitionStatus]
    key_state_topic: str
    key_states: list[dict[str, object]] | None  # None: the group never blocked or parked a key
    dlq: list[DlqTopic]
    live: list[dict[str, object]] = field(default_factory=list)  # one per --metrics-url


def classify_metadata(cursor: int, metadata: str | None) -> tuple[MetadataKind, OffsetRuns]:
    """What a committed metadata string is, and the finished offsets above ``cursor`` it holds.

    keyshared never commits a ``ks1:`` string that decodes to nothing (no finished offsets
    means an empty string, or an incarnation stamp alone: ``ks1:,<topic id>``), so one that
    decodes to nothing against its own cursor is damaged, unless it links an exactly-once side
    record (then it names only the runs nearest the cursor, maybe none, and the side record
    holds the rest; this view reads the commit only).
    """
    if not metadata or not without_incarnation(metadata):  # nothing, or a stamp alone
        return "empty", EMPTY_RUNS
    if not is_keyshared_metadata(metadata):
        return "foreign", EMPTY_RUNS
    finished = decode_finished(cursor, metadata)
    linked = linked_record(metadata) is not None
    return ("keyshared" if finished or linked else "undecodable"), finished


def offsets_to_ranges(offsets: Iterable[int]) -> list[OffsetRange]:
    """Coalesce offsets into sorted inclusive ranges."""
    ranges: list[OffsetRange] = []
    for offset in sorted(set(offsets)):
        if ranges and offset == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], offset)
        else:
            ranges.append((offset, offset))
    return ranges


def _pending_ranges(start: int, end: int, finished: OffsetRuns) -> list[OffsetRange]:
    """``[start, end)`` minus ``finished``, as inclusive ranges (run by run: a stuck record
    can have hundreds of thousands of finished offsets above it)."""
    ranges: list[OffsetRange] = []
    position = start
    for run_start, run_end in finished.from_floor(start).runs:
        if run_start >= end:
            break
        if run_start > position:
            ranges.append((position, run_start - 1))
        position = max(position, run_end)
    if position < end:
        ranges.append((position, end - 1))
    return ranges


def partition_status(
    topic: str,
    partition: int,
    *,
    committed: int | None,
    metadata: str | None,
    low: int,
    high: int,
    owner: str | None = None,
) -> PartitionStatus:
    """Combine a committed offset (``None``: nothing committed) with the partition's watermarks.

    With nothing committed the group would start at the log start (``auto.offset.reset`` aside),
    so everything from ``low`` is pending.
    """
    cursor = low if committed is None else committed
    kind, finished = classify_metadata(cursor, metadata if committed is not None else None)
    start = max(cursor, low)
    pending = _pending_ranges(start, high, finished) if high > start else []
    return PartitionStatus(
        topic=topic,
        partition=partition,
        committed=committed,
        low_watermark=low,
        high_watermark=high,
        lag=max(high - cursor, 0),
        finished_above_cursor=len(finished),
        metadata=kind,
        pending=tuple(pending),
        pending_count=sum(last - first + 1 for first, last in pending),
        deleted_unconsumed=max(low - cursor, 0),
        owner=owner,
    )


def refine_pending(
    status: PartitionStatus, seen: Iterable[int], probed_up_to: int
) -> PartitionStatus:
    """Narrow ``status.pending`` to what a read-committed reader actually found.

    :param seen: offsets of records the reader returned inside the pending ranges.
    :param probed_up_to: the reader read every visible record below this offset; pending offsets
        below it that it did not return are markers or aborted/compacted records, i.e. done.
        Pending offsets from here on stay pending (not looked at).
    """
    starts = [first for first, _ in status.pending]

    def in_pending(offset: int) -> bool:
        index = bisect.bisect_right(starts, offset) - 1
        return index >= 0 and offset <= status.pending[index][1]

    seen_in_pending = [
        offset for offset in set(seen) if offset < probed_up_to and in_pending(offset)
    ]
    tail: list[OffsetRange] = []
    for first, last in status.pending:
        if last >= probed_up_to:
            tail.append((max(first, probed_up_to), last))
    pending = offsets_to_ranges(seen_in_pending) + tail
    return PartitionStatus(
        **{
            **status.__dict__,
            "pending": tuple(pending),
            "pending_count": sum(last - first + 1 for first, last in pending),
        }
    )


def format_ranges(ranges: Sequence[OffsetRange], limit: int = 4) -> str:
    """``10..12, 15, 20..29 (+2 more ranges)``: short enough for a table cell."""
    shown = [f"{a}" if a == b else f"{a}..{b}" for a, b in ranges[:limit]]
    if len(ranges) > limit:
        shown.append(f"(+{len(ranges) - limit} more ranges)")
    return ", ".join(shown)
