"""What a ``key_shared`` member knows of its topics' life: their incarnation, their partitions.

Two ways a topic changes under a group that Kafka's own consumer groups handle and a group
of range cursors must handle itself:

- **a new incarnation** (the topic recreated) or **an operator's offset reset** while the group
  was stopped: the stored cursors no longer describe the partitions. The rules are in
  :mod:`coordinator.incarnations`; here they are applied before every read of the cursors,
  and by the low-watermark pass, which also collects the cursors that stopped counting.
- **partitions added** while the group runs: members read every partition by
  manual assignment, so nobody tells them. :meth:`TopicWatch.changed`, called from the poll
  loop's ``tick``, describes the topics every few seconds without blocking the poll thread
  (:mod:`keyshared.kafka.topic_ids`, which the other modes' poll loops use to see their topics
  recreated), and a change makes the member read again, the new partitions included.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import TopicPartition
from kazoo.client import KazooClient

from coordinator.cursors import Cursor
from coordinator.incarnations import Incarnation, StaleRead, TopicRecord, TopicRecords
from coordinator.layout import GroupLayout
from keyshared.core.types import TP
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.kafka.seams import PlugContext
from keyshared.kafka.topic_ids import Described, TopicIds

__all__ = ["TopicWatch"]

log = logging.getLogger(__name__)

_RESET_TO_END = ("latest", "end", "largest")
_STALE_READ_S = 2.0  # a read of Kafka's offsets and the records slower than this is redone
_READ_ATTEMPTS = 3


class TopicWatch:
    """A member's view of its topics: Kafka's ids and partitions, the group's records.

    :param client: the member's kazoo client.
    :param layout: the group's paths.
    :param kafka_config: the consumer's config (connection and security are reused).
    :param topics: the member's topics.
    :param timeout: bound of every synchronous Kafka request.
    """

    def __init__(
        self,
        client: KazooClient,
        layout: GroupLayout,
        kafka_config: Mapping[str, Any],
        topics: list[str],
        timeout: float,
    ) -> None:
        self._client = client
        self._layout = layout
        self._records = TopicRecords(client, layout)
        self._ids = TopicIds(kafka_config, topics)
        self._timeout = timeout
        self.records: dict[str, TopicRecord] = {}
        # (topic, p) -> (session, topic id) when Kafka was last seen holding one of the group's
        # own offsets there: this member has been live on it since, in that session
        self._seen: dict[TP, tuple[int, str]] = {}

    @staticmethod
    def of(client: KazooClient, layout: GroupLayout, context: PlugContext) -> TopicWatch:
        """The watch of a consumer run's topics."""
        timeout = context.options.startup_timeout
        return TopicWatch(client, layout, context.kafka_config, list(context.topics), timeout)

    # -- Kafka's view (keyshared.kafka.topic_ids: the poll loop's watch is the same) -----------

    @property
    def described(self) -> Described:
        """topic -> (topic id, partitions), as of the last description."""
        return self._ids.described

    @described.setter
    def described(self, described: Described) -> None:
        self._ids.described = described

    def describe(self) -> Described:
        """Describe the topics now (bounded); raises naming a topic that cannot be described."""
        return self._ids.describe(self._timeout)

    def partitions(self) -> list[TP]:
        return [(t, p) for t, (_, count) in sorted(self.described.items()) for p in range(count)]

    def changed(self) -> bool:
        """Whether a topic got partitions or a new id since the last look (poll thread; never
        waits: :meth:`keyshared.kafka.topic_ids.TopicIds.changed`)."""
        return self._ids.changed() is not None

    # -- reading: Kafka's offsets, then the records --------------------------------------------

    def read(self, consumer: KafkaConsumer, timeout: float | None = None) -> dict[TP, int]:
        """The group's Kafka committed offsets (-1: none), with every topic's record reconciled
        against them (:func:`coordinator.incarnations.reconcile`); the records are kept for
        :meth:`split` and :meth:`incarnations`."""
        committed, self.records = self.reconciled(
            lambda: self._committed(consumer, timeout or self._timeout)
        )
        return committed

    def reconciled(
        self, kafka_offsets: Callable[[], dict[TP, int]]
    ) -> tuple[dict[TP, int], dict[str, TopicRecord]]:
        """Kafka's committed offsets (``kafka_offsets``), and every topic's record reconciled
        against them. Leaves this watch's own records alone: the low-watermark pass calls it
        from a thread of its own.

        Kafka first, the records second: the group's own commits name their offset in the
        record before Kafka has it, so read in this order an own commit is never mistaken for
        a reset. A read slower than ``_STALE_READ_S`` is redone, and a change it finds is
        never stored (:class:`coordinator.incarnations.StaleRead`): an offset the group named
        after it, forgotten since, would make its own commit read as a reset. Reads that stay
        that slow raise ``StaleRead`` (the callers retry).

        An offset missing from Kafka where this member, in this session, saw Kafka hold one of
        the group's own offsets is no reset: the group has run all along (this member with
        it), so Kafka expired the offset (:func:`coordinator.incarnations.reconcile`).
        """
        for attempt in range(_READ_ATTEMPTS):
            began = time.monotonic()
            session = self._session()
            committed = kafka_offsets()
            records = {}
            try:
                for topic, (topic_id, count) in self.described.items():
                    records[topic] = self._reconciled_topic(
                        topic, topic_id, count, committed, session, began + _STALE_READ_S
                    )
            except StaleRead:
                if attempt + 1 == _READ_ATTEMPTS:
                    raise
                continue
            if time.monotonic() - began < _STALE_READ_S or attempt + 1 == _READ_ATTEMPTS:
                # A slow read with no change is sound: every offset it saw in Kafka is named.
                return committed, records
        raise AssertionError("unreachable")

    def _reconciled_topic(
        self,
        topic: str,
        topic_id: str,
        count: int,
        committed: Mapping[TP, int],
        session: int | None,
        fresh_until: float,
    ) -> TopicRecord:
        """One topic's record reconciled against ``committed`` (see :meth:`reconciled`)."""
        offsets = {p: o for (t, p), o in committed.items() if t == topic}
        running = {p for p in offsets if self._seen.get((topic, p)) == (session, topic_id)}
        record, changes = self._records.reconcile(
            topic, topic_id, count, offsets, running, fresh_until
        )
        for change in changes:
            log.warning("group %s, topic %s: %s", self._layout.group, topic, change)
        expired = sorted(p for p in running if offsets[p] < 0)
        if expired:
            log.warning(
                "group %s, topic %s: Kafka holds no committed offset of partition(s) %s "
                "while the group runs (expired after offsets.retention.minutes): not a "
                "reset; the cursors still count and the offsets are committed again",
                self._layout.group,
                topic,
                expired,
            )
        self._note_seen(topic, topic_id, offsets, record, session)
        return record

    def _session(self) -> int | None:
        client_id = self._client.client_id
        return int(client_id[0]) if client_id else None

    def _note_seen(
        self,
        topic: str,
        topic_id: str,
        offsets: Mapping[int, int],
        record: TopicRecord,
        session: int | None,
    ) -> None:
        """Remember the partitions where Kafka holds one of the group's own offsets now."""
        if session is None or session != self._session():
            return  # the session changed during the read: the group may have stopped meanwhile
        for partition, offset in offsets.items():
            if offset >= 0 and offset in record.committed.get(partition, ()):
                self._seen[(topic, partition)] = (session, topic_id)

    def _committed(self, consumer: KafkaConsumer, timeout: float) -> dict[TP, int]:
        wanted = [TopicPartition(t, p) for t, p in self.partitions()]
        found = consumer.committed(wanted, timeout=timeout)
        return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else -1 for tp in found}

    def incarnations(self) -> dict[TP, Incarnation]:
        """The stamp of each partition's cursors, as of the last :meth:`read`."""
        return {
            (t, p): self.records[t].incarnation(p)
            for t, p in self.partitions()
            if t in self.records
        }

    def split(
        self, cursors: Iterable[Cursor], records: Mapping[str, TopicRecord] | None = None
    ) -> tuple[list[Cursor], list[Cursor]]:
        """``cursors`` that belong to the incarnation of ``records`` (default: those read
        last), and those that do not. Cursors of topics this member does not read are not
        judged (they count)."""
        records = self.records if records is None else records
        valid: list[Cursor] = []
        stale: list[Cursor] = []
        for cursor in cursors:
            record = records.get(cursor.topic)
            counts = record is None or record.accepts(cursor.partition, cursor.incarnation)
            (valid if counts else stale).append(cursor)
        return valid, stale

    def bases(
        self, consumer: KafkaConsumer, committed: Mapping[TP, int], reset: str
    ) -> dict[TP, int]:
        """Where slots without a cursor start: the group's committed offset, else the start or
        the end (``auto.offset.reset``). A partition added after the group started is read
        from its start: ``latest`` would skip what was produced to it before it was seen."""
        bases: dict[TP, int] = {}
        for (topic, partition), offset in committed.items():
            if offset >= 0:
                bases[(topic, partition)] = offset
                continue
            record = self.records.get(topic)
            named = () if record is None else record.committed.get(partition, ())
            if any(o >= 0 for o in named):  # Kafka expired the group's own offset (reconciled)
                # Every offset named was a low watermark of the group or held by Kafka for it:
                # everything below the lowest is done.
                bases[(topic, partition)] = min(o for o in named if o >= 0)
                continue
            to_end = reset in _RESET_TO_END and not (record is not None and record.added(partition))
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self._timeout
            )
            bases[(topic, partition)] = high if to_end else low
        return bases
