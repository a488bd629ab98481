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

The group's own commits (the low watermark) write the record **before** Kafka: the new offset
joins the front of ``committed[p]`` beside every offset already named there and what Kafka held
(:func:`with_commit`), each with the time it was named (``named``). Kafka therefore always holds
one of the offsets named, whether a commit landed or not, its writer died in between, **or
several members' commits were on their way at once, landing in any order** (a leaving member's
final pass beside the leader's, a new leader beside a departing one). A member that reads Kafka
first and the record second never mistakes the group's own commit for a reset.

An offset leaves the list only once it cannot be on its way and no reader can still hold it
from Kafka (:func:`settled`): Kafka is seen holding another named offset, and it was named
``SETTLE_AFTER_S`` ago; naming only ``[new, held]`` would drop another member's commit in
flight, whose landing then reads as a reset (docs/chaos.md has the run that showed it).

``initial_partitions`` is the partition count when the record was made: a partition above it
was added while the group existed, so it is read from its start when nothing was committed for
it (``auto.offset.reset=latest`` would skip what was produced to it before a member saw it).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from coordinator.errors import CoordinatorError
from coordinator.layout import GroupLayout

__all__ = [
    "Incarnation",
    "StaleRead",
    "TopicRecord",
    "TopicRecords",
    "reconcile",
    "settled",
    "with_commit",
]

_ATTEMPTS = 5
SETTLE_AFTER_S = 90.0
"""How old an offset's naming must be before it may be forgotten (once Kafka holds another).

The worst chain it covers: an offset ``y`` named at ``t``; its commit lands at most ``L`` later
(the low-watermark pass sends its commit within 10 s of its read of Kafka, and librdkafka gives
a commit three sends of 5 s and a 6 s wait for the coordinator: ``L`` about 32 s). A writer
whose read of Kafka came before ``y`` landed names another offset within 10 s of that read, and
its commit lands ``L`` later, after which Kafka no longer holds ``y``: ``t + L + 10 + L`` = ``t +
74``; a member whose read saw ``y`` then and read the record after is redone past 2 s."""
MAX_NAMED = 32
"""Offsets kept named per partition, beyond which the oldest go unless Kafka was seen holding
them or their commit may still be on its way (named less than ``_IN_FLIGHT_S`` ago): one pass
every 5 s names 19 in ``SETTLE_AFTER_S``; passes whose commits fail back off as long."""
_IN_FLIGHT_S = 45.0  # longer than a commit can be on its way after its naming (~32 s)


class StaleRead(CoordinatorError):
    """A reader's read of Kafka is too old to judge the record by: it would take another
    member's commit, landed since, for a reset. The read is redone."""


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
    :param committed: partition -> the Kafka offsets the group committed lately, newest naming
        first: any of them may be what Kafka holds.
    :param named_at: when (wall clock, seconds) the last commit was named.
    :param named: partition -> when each offset of ``committed`` was named (same order);
        absent (a record written before these times existed): ``named_at``.
    :param version: the znode's version (for compare-and-set); -1 when not stored yet.
    """

    topic_id: str
    adopted: str = ""
    initial_partitions: int = 0
    epochs: Mapping[int, int] = field(default_factory=dict)
    committed: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    named_at: float = 0.0
    named: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    version: int = -1

    def incarnation(self, partition: int) -> Incarnation:
        return Incarnation(self.topic_id, self.epochs.get(partition, 0))

    def accepts(self, partition: int, stamp: Incarnation) -> bool:
        """Whether a cursor stamped ``stamp`` belongs to this incarnation of ``partition``."""
        topic_id = stamp.topic_id or self.adopted
        return topic_id == self.topic_id and stamp.epoch == self.epochs.get(partition, 0)

    def namings(self, partition: int) -> list[tuple[int, float]]:
        """Each offset named for ``partition`` with when it was named, newest naming first."""
        offsets = self.committed.get(partition, ())
        times = self.named.get(partition, ())
        if len(times) != len(offsets):  # written by a member from before per-offset times
            times = (self.named_at,) * len(offsets)
        return list(zip(offsets, times, strict=True))

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
                "named": {str(p): list(t) for p, t in sorted(self.named.items())},
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
            {int(p): tuple(float(t) for t in ts) for p, ts in raw.get("named", {}).items()},
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
    epochs, known, named = dict(record.epochs), dict(record.committed), dict(record.named)
    changes = []
    for partition, offset in sorted(committed.items()):
        if offset < 0 and partition in running:
            continue  # expired under a running group (module docstring)
        if offset not in known.get(partition, (-1,)):
            epochs[partition] = epochs.get(partition, 0) + 1
            named.pop(partition, None)  # Kafka holds it: kept while it does, whatever its age
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
    return replace(record, epochs=epochs, committed=known, named=named), changes


def with_commit(
    record: TopicRecord, offsets: Mapping[int, int], held: Mapping[int, int], now: float
) -> TopicRecord:
    """``record`` naming ``offsets`` as the group's next commit, in front of every offset
    named already (another member's commit may be on its way, or have landed since ``held``
    was read) and of what this writer read Kafka to hold (``held``)."""
    committed, named = dict(record.committed), dict(record.named)
    for partition, offset in offsets.items():
        # Nothing held (-1) is named like any other offset: a first commit that does not land
        # leaves Kafka holding nothing, which must not read as a reset.
        # What Kafka was seen holding counts as named now: a member may have read it there a
        # moment ago, so it must not be forgotten sooner than the new offset.
        before, at = held.get(partition, -1), math.ceil(now * 10) / 10  # rounded up: never older
        entries = [(offset, at), *record.namings(partition)]
        entries = [(o, at if o == before else t) for o, t in entries]
        if all(o != before for o, _ in entries):
            entries.append((before, at))
        entries = _first_of_each(entries)
        if len(entries) > MAX_NAMED:
            # The oldest go, but never what Kafka was seen holding, nor an offset named so
            # recently that its commit may still be on its way (many members' final passes at
            # once can name more than MAX_NAMED in that time: the list then stays longer).
            young = [e for e in entries[MAX_NAMED:] if e[0] == before or at - e[1] < _IN_FLIGHT_S]
            entries = entries[:MAX_NAMED] + young
        _store(committed, named, partition, entries)
    return replace(record, committed=committed, named=named, named_at=now)


def settled(record: TopicRecord, held: Mapping[int, int], now: float | None) -> TopicRecord:
    """``record`` without the offsets that can no longer be what Kafka holds, so that a later
    reset to one of them shows. Kafka is seen holding another named offset (``held``), and the
    offset was named (or seen held by a writer) ``SETTLE_AFTER_S`` ago: its commit is no longer
    on its way, and no member's read of Kafka that saw it is still going (members redo a read
    that took more than a few seconds).

    ``now`` None: the last member leaving, right after its own commit landed; nobody else is
    left to commit or read, so when Kafka holds the newest offset named, only it is kept."""
    committed, named = dict(record.committed), dict(record.named)
    for partition, offset in held.items():
        entries = record.namings(partition)
        if len(entries) < 2 or all(o != offset for o, _ in entries):
            continue  # nothing to forget, or Kafka holds none of them (reconcile's business)
        if now is None:
            kept = entries[:1] if entries[0][0] == offset else entries
        else:
            kept = [(o, t) for o, t in entries if o == offset or now - t < SETTLE_AFTER_S]
        _store(committed, named, partition, kept)
    return replace(record, committed=committed, named=named)


def _first_of_each(entries: list[tuple[int, float]]) -> list[tuple[int, float]]:
    seen: set[int] = set()
    kept = []
    for offset, at in entries:
        if offset not in seen:
            seen.add(offset)
            kept.append((offset, at))
    return kept


def _store(
    committed: dict[int, tuple[int, ...]],
    named: dict[int, tuple[float, ...]],
    partition: int,
    entries: list[tuple[int, float]],
) -> None:
    committed[partition] = tuple(o for o, _ in entries)
    named[partition] = tuple(t for _, t in entries)


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
        fresh_until: float | None = None,
    ) -> tuple[TopicRecord, list[str]]:
        """:func:`reconcile` against the stored record, storing the result if it changed.

        :param fresh_until: when (``time.monotonic()``) the read of ``committed`` gets too old
            to judge the record by: a change found later is not stored (:class:`StaleRead`),
            since Kafka may have taken another member's commit since, named after the read.
        """
        for _attempt in range(_ATTEMPTS):
            stored_before = self.read(topic)
            record, changes = reconcile(stored_before, topic_id, partitions, committed, running)
            if not changes:
                return record, changes
            # Only a partition's reset is judged by Kafka's offsets; a first record or a
            # recreated topic is not, and a slow read cannot make it wrong.
            judged = stored_before is not None and stored_before.topic_id == topic_id
            if judged and fresh_until is not None and time.monotonic() > fresh_until:
                raise StaleRead(f"the read of topic {topic!r}'s committed offsets is too old")
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
            # Named afresh even when the record names the offsets already: the commit about to
            # be sent must not outlive its naming (SETTLE_AFTER_S), nor what Kafka was seen
            # holding.
            if self.write(topic, with_commit(record, offsets, held, time.time())) is not None:
                return True
        raise CoordinatorError(f"the record of topic {topic!r} kept changing; gave up")

    def settle(
        self,
        topic: str,
        topic_id: str,
        held: Mapping[int, int],
        seen_at: float | None = None,
        at_once: bool = False,
    ) -> None:
        """:func:`settled`, stored. Best effort: a race leaves it to the next pass.

        :param seen_at: when (wall clock) Kafka was read to hold ``held``; offsets are judged
            old from then, not from now (default: now).
        """
        record = self.read(topic)
        if record is None or record.topic_id != topic_id:
            return
        after = settled(record, held, None if at_once else (seen_at or time.time()))
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
            named = {p: t for p, t in record.named.items() if p not in offsets}
            after = replace(record, epochs=epochs, committed=committed, named=named)
            if self.write(topic, after) is not None:
                return
        raise CoordinatorError(f"the record of topic {topic!r} kept changing; gave up")
