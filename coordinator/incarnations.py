"""Topic incarnations: which life of a topic a group's cursors belong to.

Range cursors outlive the topic they describe. A topic deleted and created again under the
same name, or a group whose Kafka offsets an operator reset while it was stopped
(``kafka-consumer-groups --reset-offsets``), would otherwise resume at the old cursors and count
every record below them as done: silent loss, or a reset that has no effect.

So the group keeps one small record per topic, ``topics/<topic>``::

    {"topic_id": "<Kafka's topic id>", "adopted": "<topic id of unstamped cursors>",
     "initial_partitions": 3,
     "epochs": {"<p>": 1, ...},            # a partition's cursor epoch, bumped by each reset
     "committed": {"<p>": [new, old], ...}} # Kafka offsets the group itself committed last

and every cursor is stamped with the topic id and its partition's epoch when written. A cursor
counts only if its stamp is the record's (:meth:`TopicRecord.accepts`); any other is ignored,
and collected by the leader.

**The rules** (:func:`reconcile`, pure; every member applies them before it reads cursors):

- Kafka's topic id differs from the record's: the topic was recreated. Every cursor of it is
  of another incarnation; the record starts afresh. Kafka dropped the group's offsets with the
  old topic, so every partition is read from its start (``initial_partitions`` 0: all of them
  are new to the group, whatever ``auto.offset.reset`` says).
- Kafka's committed offset of a partition is not one the group committed itself: someone else
  (an operator's reset, ``--delete-offsets``) moved it while the group was stopped. The
  partition's epoch goes up, so its cursors stop counting and its slots start at that offset.
- Except a missing offset (-1) of a partition the group has been running on since Kafka was
  seen holding one of its own offsets there (``running``): Kafka *expired* it. A group of
  members that only ``assign()`` has no members in Kafka's eyes, so Kafka drops its offsets
  ``offsets.retention.minutes`` after their commit even while it runs; taken for a reset, every
  cursor of a quiet partition was dropped and the next re-read replayed it (or, with
  ``latest``, skipped what was unfinished). The cursors keep counting; the low-watermark pass
  commits the offset again (and refreshes unchanged ones well within the retention period).

The group's own commits (the low watermark) write the record **before** Kafka:
``committed[p] = [new, what Kafka held]``. Kafka therefore always holds one of the two values
named, whether the commit landed or not, or its writer died in between; a member that reads
Kafka first and the record second never mistakes the group's own commit for a reset.

``initial_partitions`` is the partition count when the record was made: a partition above it
was added while the group existed, so it is read from its start when nothing was committed for
it (``auto.offset.reset=latest`` would skip what was produced to it before a member saw it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from coordinator.errors import CoordinatorError
from coordinator.layout import GroupLayout

__all__ = ["Incarnation", "TopicRecord", "TopicRecords", "reconcile", "settled", "with_commit"]

_ATTEMPTS = 5
SETTLE_AFTER_S = 10.0
"""How old a commit's naming must be before its older offset is forgotten."""


@dataclass(frozen=True)
class Incarnation:
    """What a cursor is stamped with: the topic's id and its partition's epoch."""

    topic_id: str = ""
    epoch: int = 0


@dataclass(frozen=True)
class TopicRecord:
    """A group's record of one topic (see the module docstring).

    :param topic_id: Kafka's id of the incarnation the cursors belong to.
    :param adopted: the topic id that cursors without a stamp (written before stamps existed)
        belong to; "" once the topic was recreated.
    :param initial_partitions: the partition count when the record was made.
    :param epochs: partition -> epoch of its cursors (absent: 0).
    :param committed: partition -> the Kafka offsets the group last committed (one or two:
        the newest, and what Kafka held before it).
    :param named_at: when (wall clock, seconds) the last commit was named: the older offset
        is forgotten only well after it (:meth:`TopicRecords.settle`).
    :param version: the znode's version (for compare-and-set); -1 when not stored yet.
    """

    topic_id: str
    adopted: str = ""
    initial_partitions: int = 0
    epochs: Mapping[int, int] = field(default_factory=dict)
    committed: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    named_at: float = 0.0
    version: int = -1

    def incarnation(self, partition: int) -> Incarnation:
        return Incarnation(self.topic_id, self.epochs.get(partition, 0))

    def accepts(self, partition: int, stamp: Incarnation) -> bool:
        """Whether a cursor stamped ``stamp`` belongs to this incarnation of ``partition``."""
        topic_id = stamp.topic_id or self.adopted
        return topic_id == self.topic_id and stamp.epoch == self.epochs.get(partition, 0)

    def added(self, partition: int) -> bool:
        """Whether ``partition`` was added after the group started on this incarnation."""
        return partition >= self.initial_partitions

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "topic_id": self.topic_id,
                "adopted": self.adopted,
                "initial_partitions": self.initial_partitions,
                "epochs": {str(p): e for p, e in sorted(self.epochs.items())},
                "committed": {str(p): list(o) for p, o in sorted(self.committed.items())},
                "named_at": self.named_at,
            }
        ).encode()

    @staticmethod
    def from_json(data: bytes, version: int) -> TopicRecord:
        raw = json.loads(data)
        return TopicRecord(
            str(raw["topic_id"]),
            str(raw.get("adopted", "")),
            int(raw.get("initial_partitions", 0)),
            {int(p): int(e) for p, e in raw.get("epochs", {}).items()},
            {
                int(p): tuple(int(o) for o in offsets)
                for p, offsets in raw.get("committed", {}).items()
            },
            float(raw.get("named_at", 0.0)),
            version,
        )


def reconcile(
    record: TopicRecord | None,
    topic_id: str,
    partitions: int,
    committed: Mapping[int, int],
    running: AbstractSet[int] = frozenset(),
) -> tuple[TopicRecord, list[str]]:
    """The record that holds now, and what changed (for the log; empty: nothing).

    :param record: the stored record, if any.
    :param topic_id: Kafka's id of the topic now.
    :param partitions: the topic's partition count now.
    :param committed: Kafka's committed offset of the group per partition (-1: none), read
        **before** ``record``.
    :param running: partitions the reader has been live on, in one session, since it saw Kafka
        hold one of the group's own offsets there: the group was never stopped meanwhile, so
        an offset missing now expired and is no reset.
    """
    if record is None:
        # A group from before records existed keeps its (unstamped) cursors: they can only be
        # of this incarnation or of nothing the group can tell apart any more.
        fresh = TopicRecord(
            topic_id,
            adopted=topic_id,
            initial_partitions=partitions,
            committed={p: (o,) for p, o in committed.items() if o >= 0},
        )
        return fresh, [f"first record of the topic (id {topic_id})"]
    if record.topic_id != topic_id:
        # Every partition of the new incarnation is new to the group: read from its start where
        # nothing was committed, whatever auto.offset.reset says (as for added partitions).
        fresh = TopicRecord(
            topic_id,
            initial_partitions=0,
            committed={p: (o,) for p, o in committed.items() if o >= 0},
            version=record.version,
        )
        return fresh, [f"topic recreated (id {record.topic_id} -> {topic_id}): cursors dropped"]
    epochs, known = dict(record.epochs), dict(record.committed)
    changes = []
    for partition, offset in sorted(committed.items()):
        if offset < 0 and partition in running:
            continue  # expired under a running group (module docstring)
        if offset not in known.get(partition, (-1,)):
            epochs[partition] = epochs.get(partition, 0) + 1
            if offset >= 0:
                known[partition] = (offset,)
            else:
                known.pop(partition, None)
            changes.append(
                f"partition {partition}: Kafka's committed offset {offset} is not the group's "
                f"{list(record.committed.get(partition, ()))} (reset while stopped): its "
                "cursors are dropped"
            )
    if not changes:
        return record, []
    return replace(record, epochs=epochs, committed=known), changes


def with_commit(
    record: TopicRecord, offsets: Mapping[int, int], held: Mapping[int, int], now: float
) -> TopicRecord:
    """``record`` naming ``offsets`` as the group's next commit, beside what Kafka ``held``."""
    committed = dict(record.committed)
    for partition, offset in offsets.items():
        # Nothing held (-1) is named like any other offset: a first commit that does not land
        # leaves Kafka holding nothing, which must not read as a reset.
        before = held.get(partition, -1)
        committed[partition] = (offset,) if before == offset else (offset, before)
    return replace(record, committed=committed, named_at=now)


def settled(record: TopicRecord, held: Mapping[int, int], now: float | None) -> TopicRecord:
    """``record`` without the older offset of each partition whose newer one Kafka is seen
    to hold (``held``), so that a later reset to that older offset shows. Only once the naming
    is ``SETTLE_AFTER_S`` old (``now`` None: at once, nobody else is reading): a member whose
    read of Kafka came before the commit and whose read of the record came after the settle
    would find neither offset and take the group's own commit for a reset; members redo a
    read that took more than a few seconds."""
    if now is not None and now - record.named_at < SETTLE_AFTER_S:
        return record
    committed = dict(record.committed)
    for partition, offset in held.items():
        if len(committed.get(partition, ())) > 1 and committed[partition][0] == offset:
            committed[partition] = (offset,)
    return replace(record, committed=committed)


class TopicRecords:
    """The group's topic records in ZooKeeper, written compare-and-set.

    :param client: a started kazoo client.
    :param layout: the group's paths.
    """

    def __init__(self, client: KazooClient, layout: GroupLayout) -> None:
        self._client = client
        self._layout = layout

    def read(self, topic: str) -> TopicRecord | None:
        try:
            data, stat = self._client.get(self._layout.topic(topic))
        except NoNodeError:
            return None
        return TopicRecord.from_json(data, stat.version)

    def write(self, topic: str, record: TopicRecord) -> TopicRecord | None:
        """Store ``record`` if the stored one is still the one it was made from (its
        ``version``); the stored record, or None when another writer came first."""
        path = self._layout.topic(topic)
        try:
            if record.version < 0:
                self._client.ensure_path(self._layout.topics)
                self._client.create(path, record.to_json())
                return replace(record, version=0)
            stat = self._client.set(path, record.to_json(), version=record.version)
        except (NodeExistsError, BadVersionError, NoNodeError):
            return None
        return replace(record, version=stat.version)

    def reconcile(
        self,
        topic: str,
        topic_id: str,
        partitions: int,
        committed: Mapping[int, int],
        running: AbstractSet[int] = frozenset(),
    ) -> tuple[TopicRecord, list[str]]:
        """:func:`reconcile` against the stored record, storing the result if it changed."""
        for _attempt in range(_ATTEMPTS):
            record, changes = reconcile(self.read(topic), topic_id, partitions, committed, running)
            if not changes:
                return record, changes
            stored = self.write(topic, record)
            if stored is not None:
                return stored, changes
        raise CoordinatorError(f"the record of topic {topic!r} kept changing; gave up")

    def commit(
        self, topic: str, topic_id: str, offsets: Mapping[int, int], held: Mapping[int, int]
    ) -> bool:
        """Name ``offsets`` as the group's next Kafka commit (before making it). False when
        the record is of another incarnation (the commit must not be made)."""
        for _attempt in range(_ATTEMPTS):
            record = self.read(topic)
            if record is None or record.topic_id != topic_id:
                return False
            if all(offsets[p] in record.committed.get(p, ()) for p in offsets):
                return True
            if self.write(topic, with_commit(record, offsets, held, time.time())) is not None:
                return True
        raise CoordinatorError(f"the record of topic {topic!r} kept changing; gave up")

    def settle(
        self, topic: str, topic_id: str, held: Mapping[int, int], at_once: bool = False
    ) -> None:
        """:func:`settled`, stored. Best effort: a race leaves it to the next pass."""
        record = self.read(topic)
        if record is None or record.topic_id != topic_id:
            return
        after = settled(record, held, None if at_once else time.time())
        if after.committed != record.committed:
            self.write(topic, after)

    def reset(self, topic: str, topic_id: str, partitions: int, offsets: Mapping[int, int]) -> None:
        """An operator's reset (``keyshared reset``): the cursors of each partition of
        ``offsets`` stop counting, and ``offsets`` are the group's commits there."""
        for _attempt in range(_ATTEMPTS):
            record = self.read(topic)
            if record is None:
                record = TopicRecord(topic_id, adopted=topic_id, initial_partitions=partitions)
            elif record.topic_id != topic_id:
                record = TopicRecord(
                    topic_id, initial_partitions=partitions, version=record.version
                )
            epochs = {**record.epochs, **{p: record.epochs.get(p, 0) + 1 for p in offsets}}
            committed = {**record.committed, **{p: (o,) for p, o in offsets.items()}}
            if self.write(topic, replace(record, epochs=epochs, committed=committed)) is not None:
                return
        raise CoordinatorError(f"the record of topic {topic!r} kept changing; gave up")
