"""Cursors: where a slot range's processing stands in each partition, written under fencing.

In ``key_shared`` mode several members consume the same partition, each for its own slots, so
Kafka's one committed offset per partition cannot say where each range stands. Each range owner
keeps a cursor per (range, topic, partition) in ``cursors/<lo>-<hi>/<topic>@<p>``: the offset
from which that range must be re-read (every record of the range below it is done), plus an
optional metadata string (the consumer's codec of finished offsets above the cursor).

Every flush is **one** ZooKeeper ``multi`` transaction: a ``check`` that the writer's exact
lease znode still exists, then one write per staged cursor. A zombie, whose lease was released
or vanished with its session (and perhaps re-created by a new owner: a new znode, another
path), gets :class:`Fenced` and nothing is written. Staging cursors in memory and flushing at
the commit interval bounds the write rate, however many partitions and records there are; a
member flushes all its ranges' writers together (:func:`flush_together`): one transaction per
member per interval, one ``check`` per lease in it, whatever the ranges.

A new owner reads the cursors of every range overlapping its own (ranges split and merge between
generations) and starts each partition at the lowest of them, :func:`start_positions`, which can
only re-deliver, never skip.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)

from coordinator.errors import CoordinatorError, Fenced
from coordinator.incarnations import Incarnation
from coordinator.layout import GroupLayout, parse_partition, parse_range
from coordinator.leases import Lease
from keyshared.core.claims import StoredCursor, superseded
from keyshared.core.slots import SlotRange

__all__ = [
    "MAX_TRANSACTION_BYTES",
    "Cursor",
    "CursorFlush",
    "CursorWriter",
    "delete_superseded",
    "flush_together",
    "read_cursors",
    "start_positions",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cursor:
    """A stored cursor.

    :param slots: the range it belongs to.
    :param topic: the topic.
    :param partition: the partition.
    :param offset: the next offset to process for this range (all records below are done).
    :param metadata: the consumer's own string (e.g. finished offsets above ``offset``).
    :param member_id: who wrote it.
    :param token: the writer's fencing token when it wrote.
    :param version: when it was written (ZooKeeper's ``mzxid``), to order two cursors of one
        lease; 0 for a cursor not read from ZooKeeper.
    """

    slots: SlotRange
    topic: str
    partition: int
    offset: int
    metadata: str = ""
    member_id: str = ""
    token: int = -1
    version: int = 0
    data_version: int = -1  # the znode's own version, for a conditional delete; -1: unknown
    # The topic incarnation it was written in (coordinator.incarnations); a cursor of another
    # one (topic recreated, offsets reset) counts for nothing. Empty: written before stamps.
    incarnation: Incarnation = field(default_factory=Incarnation)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "offset": self.offset,
                "metadata": self.metadata,
                "member": self.member_id,
                "token": self.token,
                "topic_id": self.incarnation.topic_id,
                "epoch": self.incarnation.epoch,
            }
        ).encode()


def read_cursors(
    client: KazooClient,
    layout: GroupLayout,
    overlapping: SlotRange | Iterable[SlotRange] | None = None,
) -> list[Cursor]:
    """Stored cursors of every range (or only those overlapping ``overlapping``: one range or
    several), ordered by range, topic and partition. Ranges not overlapping are never read:
    one listing of the range directories, then only the ranges asked for.

    The reads are pipelined (kazoo's async calls, then their results): a group that has seen
    many plans keeps a cursor per range shape and partition, hundreds of znodes, and one round
    trip each made every re-read of a member take seconds on a loaded ZooKeeper.
    """
    ranges = [parse_range(name) for name in sorted(client.get_children(layout.cursors))]
    if overlapping is not None:
        wanted = [overlapping] if isinstance(overlapping, SlotRange) else list(overlapping)
        ranges = [slots for slots in ranges if any(slots.overlaps(w) for w in wanted)]
    listings = [(slots, client.get_children_async(layout.cursor_range(slots))) for slots in ranges]
    reads = []
    for slots, listing in listings:
        try:
            names = listing.get()
        except NoNodeError:
            continue
        for name in sorted(names):
            topic, partition = parse_partition(name)
            path = layout.cursor(slots, topic, partition)
            reads.append((slots, topic, partition, client.get_async(path)))
    cursors: list[Cursor] = []
    for slots, topic, partition, read in reads:
        try:
            data, stat = read.get()
        except NoNodeError:
            continue
        raw = json.loads(data)
        cursors.append(
            Cursor(
                slots,
                topic,
                partition,
                int(raw["offset"]),
                str(raw.get("metadata", "")),
                str(raw.get("member", "")),
                int(raw.get("token", -1)),
                stat.mzxid,
                stat.version,
                Incarnation(str(raw.get("topic_id", "")), int(raw.get("epoch", 0))),
            )
        )
    return sorted(cursors, key=lambda c: (c.slots, c.topic, c.partition))


def start_positions(
    client: KazooClient, layout: GroupLayout, slots: SlotRange
) -> dict[tuple[str, int], Cursor]:
    """Where a new owner of ``slots`` starts in each partition: the lowest cursor among the
    ranges overlapping it (partitions without any cursor are absent: use the group's Kafka
    committed offset or the reset policy)."""
    starts: dict[tuple[str, int], Cursor] = {}
    for cursor in read_cursors(client, layout, slots):
        key = (cursor.topic, cursor.partition)
        if key not in starts or cursor.offset < starts[key].offset:
            starts[key] = cursor
    return starts


def delete_superseded(client: KazooClient, layout: GroupLayout, cursors: list[Cursor]) -> int:
    """Delete the cursors no slot resolves to any more (:func:`keyshared.core.claims.superseded`)
    and the range directories they leave empty; return how many cursors went.

    Each delete is conditional on the version read, so a cursor written again since (it may
    have become the latest for its slots) stays; a directory is deleted only if empty. Writers
    recreate what they find gone. Pipelined: one round trip for all of them.
    """
    by_partition: dict[tuple[str, int], list[Cursor]] = {}
    for cursor in cursors:
        by_partition.setdefault((cursor.topic, cursor.partition), []).append(cursor)
    doomed: list[Cursor] = []
    for group in by_partition.values():
        stored = [StoredCursor(c.slots, c.offset, c.token, version=c.version) for c in group]
        doomed += [group[i] for i in superseded(stored) if group[i].data_version >= 0]
    deletes = [
        client.delete_async(layout.cursor(c.slots, c.topic, c.partition), version=c.data_version)
        for c in doomed
    ]
    gone = 0
    for result in deletes:
        try:
            result.get()
            gone += 1
        except (NoNodeError, BadVersionError):
            pass  # deleted by someone else, or written again since: it stays
    remaining = Counter(c.slots for c in cursors) - Counter(c.slots for c in doomed)
    emptied = {c.slots for c in doomed} - set(remaining)
    for result in [client.delete_async(layout.cursor_range(slots)) for slots in emptied]:
        with contextlib.suppress(NoNodeError, NotEmptyError):
            result.get()
    if gone:
        log.debug("deleted %d superseded cursor(s), %d empty range(s)", gone, len(emptied))
    return gone


class CursorWriter:
    """Stages one range's cursors and writes them, fenced by its lease, in one transaction.

    Example::

        writer = CursorWriter(client, GroupLayout("orders"), lease)
        writer.stage("payments", 0, 1200)
        writer.stage("payments", 1, 877, metadata="...")
        writer.flush()          # one ZooKeeper write; Fenced if the lease is gone

    A range put together from pieces that resume at different points can also be written piece
    by piece (:meth:`stage_pieces`): under each piece's own path, with this lease's token.
    A member holding several ranges flushes their writers together, one transaction for all
    (:func:`flush_together`).

    :param client: the kazoo client of the session that holds ``lease``.
    :param layout: the group's paths.
    :param lease: the writer's range lease (:class:`coordinator.leases.RangeLeases`).
    """

    def __init__(self, client: KazooClient, layout: GroupLayout, lease: Lease) -> None:
        self._client = client
        self._layout = layout
        self.lease = lease
        self.slots = lease.slots
        self._staged: dict[tuple[str, int], list[Cursor]] = {}
        self._existing: set[str] = set()
        self._directories = {self.slots}  # range directories known to exist
        self._lock = threading.Lock()  # guards _staged: stage() runs on worker threads
        self._flush_lock = threading.Lock()  # one flush at a time, so cursors never go back
        with contextlib.suppress(NodeExistsError):
            client.create(layout.cursor_range(self.slots), b"")

    def stage(
        self,
        topic: str,
        partition: int,
        offset: int,
        metadata: str = "",
        incarnation: Incarnation | None = None,
    ) -> None:
        """Remember the latest cursor of a partition until the next :meth:`flush` (thread-safe;
        a later stage of the same partition replaces an earlier one)."""
        self.stage_pieces(topic, partition, [(self.slots, offset, metadata)], incarnation)

    def stage_pieces(
        self,
        topic: str,
        partition: int,
        pieces: list[tuple[SlotRange, int, str]],
        incarnation: Incarnation | None = None,
    ) -> None:
        """Like :meth:`stage`, one cursor per ``(slots, offset, metadata)``, each ``slots`` a
        part of this range (or all of it). They replace whatever was staged for the partition,
        and are written in one transaction: one version, so that a later write of the whole
        range is never tied with them. ``incarnation``: the topic incarnation the offsets are
        of (:mod:`coordinator.incarnations`)."""
        lease = self.lease
        stamp = incarnation or Incarnation()
        cursors = [
            Cursor(slots, topic, partition, offset, metadata, lease.member_id, lease.token, 0, -1,
                   stamp)
            for slots, offset, metadata in pieces
        ]  # fmt: skip
        if any(not (self.slots.lo <= c.slots.lo and c.slots.hi <= self.slots.hi) for c in cursors):
            raise ValueError(f"a piece outside {self.slots}: {[str(c.slots) for c in cursors]}")
        with self._lock:
            self._staged[(topic, partition)] = cursors

    @property
    def pending(self) -> int:
        """Partitions whose cursors are staged and not yet written."""
        with self._lock:
            return len(self._staged)

    def flush(self) -> int:
        """Write every staged cursor in one transaction conditional on the lease (a
        :func:`flush_together` of this writer alone).

        :return: the number of cursors written (0 writes nothing and costs nothing).
        :raises Fenced: the lease znode is gone; nothing was written and the staged cursors are
            dropped, since this member may no longer speak for the range.
        """
        report = flush_together([self])
        if self.slots in report.fenced:
            raise report.fenced[self.slots]
        if self.slots in report.failed:
            raise report.failed[self.slots]
        return report.written.get(self.slots, 0)

    def _take(self) -> _Batch | None:
        """The staged cursors, now out of the stage (``_flush_lock`` held)."""
        with self._lock:
            staged, self._staged = self._staged, {}
        if not staged:
            return None
        return _Batch(self, staged)

    def _restage(self, staged: dict[tuple[str, int], list[Cursor]]) -> None:
        """A write failed without an answer (e.g. connection lost): keep them for the next
        flush, behind whatever was staged since."""
        with self._lock:
            self._staged = {**staged, **self._staged}

    def _ensure_directories(self, cursors: list[Cursor]) -> None:
        for slots in {c.slots for c in cursors} - self._directories:
            with contextlib.suppress(NodeExistsError):
                self._client.create(self._layout.cursor_range(slots), b"")
            self._directories.add(slots)

    def _learn(self, path: str, cursor: Cursor, result: Exception) -> None:
        """What the failing op of a cursor says, for the next attempt."""
        if isinstance(result, NodeExistsError):
            self._existing.add(path)  # a race: someone created it since the lookup
        elif isinstance(result, NoNodeError):
            # Collected as superseded (delete_superseded), perhaps with its directory:
            # create both again.
            self._existing.discard(path)
            self._directories.discard(cursor.slots)
        else:
            raise CoordinatorError(f"writing cursor {path} failed: {result!r}")


MAX_TRANSACTION_BYTES = 512 * 1024
"""A flush of several ranges is split into several transactions only past this many bytes of
paths and data: half of ZooKeeper's default request limit (``jute.maxbuffer``, about 1 MB),
which a ``multi`` must fit whole. One range's cursors always go in one transaction (its pieces
share one version), however large."""

_OP_BYTES = 64  # a multi op's own framing, generously (type, flags, version, lengths, ACL)
_RACE_ATTEMPTS = 3  # per range in a transaction: races learnt before giving up


@dataclass
class CursorFlush:
    """What one :func:`flush_together` did, per range.

    :param written: cursors written per range (ranges with nothing staged are absent).
    :param fenced: the ranges whose lease was gone: nothing of theirs was written, and what
        they had staged is dropped.
    :param failed: the ranges whose write failed otherwise (e.g. connection lost): their
        cursors stay staged for the next flush.
    :param transactions: the ``multi`` transactions committed or tried.
    """

    written: dict[SlotRange, int] = field(default_factory=dict)
    fenced: dict[SlotRange, Fenced] = field(default_factory=dict)
    failed: dict[SlotRange, Exception] = field(default_factory=dict)
    transactions: int = 0


class _Batch:
    """One writer's staged cursors on their way into a transaction."""

    def __init__(self, writer: CursorWriter, staged: dict[tuple[str, int], list[Cursor]]) -> None:
        self.writer = writer
        self.staged = staged
        self.cursors = [cursor for pieces in staged.values() for cursor in pieces]
        self.paths = [writer._layout.cursor(c.slots, c.topic, c.partition) for c in self.cursors]
        self.data = [cursor.to_json() for cursor in self.cursors]
        ops = sum(
            len(path) + len(data) + _OP_BYTES
            for path, data in zip(self.paths, self.data, strict=True)
        )
        self.size = len(writer.lease.path) + _OP_BYTES + ops


def flush_together(writers: Iterable[CursorWriter]) -> CursorFlush:
    """Write the staged cursors of several ranges' writers (of one session, distinct ranges) in
    one ZooKeeper ``multi``: a ``check`` of each lease whose cursors are in it, then the writes.

    A member's whole commit interval is then one transaction, however many ranges it holds.
    Fencing is as strong as one range's flush: a lease found gone makes the transaction fail,
    and it is tried again without that range's ops, so that range writes nothing and is
    reported in :attr:`CursorFlush.fenced` while the others' cursors are written by the same
    call. Past :data:`MAX_TRANSACTION_BYTES` the ranges are split over several transactions.
    Never raises for a range's failure: each is reported (see :class:`CursorFlush`).
    """
    report = CursorFlush()
    ordered = sorted(writers, key=lambda w: (w.slots, id(w)))
    with contextlib.ExitStack() as locks:
        for writer in ordered:  # one order for everyone: two flushes never deadlock
            locks.enter_context(writer._flush_lock)
        batches = [batch for writer in ordered if (batch := writer._take()) is not None]
        for chunk in _chunks(batches):
            live = list(chunk)
            try:
                _commit(live, report)
            except Exception as exc:
                for batch in live:  # unanswered: written at the next flush
                    batch.writer._restage(batch.staged)
                    report.failed[batch.writer.slots] = exc
    return report


def _chunks(batches: list[_Batch]) -> list[list[_Batch]]:
    chunks: list[list[_Batch]] = []
    size = 0
    for batch in batches:
        if not chunks or size + batch.size > MAX_TRANSACTION_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(batch)
        size += batch.size
    return chunks


def _commit(live: list[_Batch], report: CursorFlush) -> None:
    """Commit ``live`` in one transaction, retried without a fenced range and after a race;
    ``live`` keeps the batches not written yet (for the caller to re-stage if this raises)."""
    attempts = _RACE_ATTEMPTS * len(live)
    while live:
        _learn_existing(live)
        for batch in live:
            batch.writer._ensure_directories(batch.cursors)
        transaction = live[0].writer._client.transaction()
        ops: list[tuple[_Batch, int]] = []  # per op: its batch, its cursor's index (-1: check)
        for batch in live:
            transaction.check(batch.writer.lease.path, 0)
            ops.append((batch, -1))
            for i, (path, data) in enumerate(zip(batch.paths, batch.data, strict=True)):
                if path in batch.writer._existing:
                    transaction.set_data(path, data)
                else:
                    transaction.create(path, data)
                ops.append((batch, i))
        report.transactions += 1
        results = transaction.commit()
        if not any(isinstance(r, Exception) for r in results):
            for batch in live:
                batch.writer._existing.update(batch.paths)
                report.written[batch.writer.slots] = len(batch.cursors)
            live.clear()
            return
        raced, waiting = False, len(live)
        # A multi stops at its first failing op: those before it answer RolledBackError, those
        # after it RuntimeInconsistency (never run). Only the failing op says anything.
        for (batch, i), result in zip(ops, results, strict=True):
            if not isinstance(result, Exception):
                continue
            if isinstance(result, RolledBackError | RuntimeInconsistency):
                continue
            if i < 0 and isinstance(result, NoNodeError | BadVersionError):
                slots = batch.writer.slots
                what = f"write {len(batch.cursors)} cursor(s) of {slots}"
                report.fenced[slots] = Fenced(batch.writer.lease.path, what)
                live.remove(batch)
                continue
            try:
                if i < 0:
                    raise CoordinatorError(f"checking lease {batch.writer.lease.path}: {result!r}")
                batch.writer._learn(batch.paths[i], batch.cursors[i], result)
                if isinstance(result, NoNodeError):  # collected: perhaps more than this one
                    batch.writer._existing.difference_update(batch.paths)  # looked up again
                raced = True
            except CoordinatorError as exc:  # that range alone waits for the next flush
                batch.writer._restage(batch.staged)
                report.failed[batch.writer.slots] = exc
                live.remove(batch)
        if raced or len(live) == waiting:
            attempts -= 1
            if attempts <= 0 and live:
                names = ", ".join(str(batch.writer.slots) for batch in live)
                raise CoordinatorError(f"cursor transaction for {names} kept racing; gave up")


def _learn_existing(batches: list[_Batch]) -> None:
    """Which cursor znodes not known to exist do, in one pipelined round trip. A range's next
    holder finds its predecessors' cursor znodes: without this it would learn them one failed
    transaction at a time."""
    lookups = [
        (batch.writer, path, batch.writer._client.exists_async(path))
        for batch in batches
        for path in batch.paths
        if path not in batch.writer._existing
    ]
    for writer, path, lookup in lookups:
        if lookup.get() is not None:
            writer._existing.add(path)
