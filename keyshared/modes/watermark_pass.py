"""The ``key_shared`` leader's low-watermark pass, on a thread of its own.

A ``key_shared`` group's progress lives in its range cursors; Kafka's committed offsets are
brought up to them (the lowest cursor of each partition) so that lag tools see the group, and
the pass also collects the cursors that stopped counting. The pass reads Kafka's offsets, names
its commit in the topic's record, then commits: requests to the broker, each of which can wait
for as long as the link to the broker lets it.

It ran on the poll thread and used the consumer. A link to the broker that went silent between
the read and the commit left the synchronous commit waiting for its socket timeout, a minute:
no tick ran meanwhile, so the member did not notice Kafka's silence and kept its ranges, and
their keys waited as long (``tests/partitions/test_kafka_cut.py`` blackholes the link exactly
there). So the pass
runs on a thread of its own, with a Kafka client of its own; the poll thread only starts it,
and waits for it (bounded) only when the member leaves (:meth:`LowWatermarkPass.final`).

Its client is a plain consumer of the group, used synchronously on that thread, rather than
the admin client's futures: those complete in a librdkafka thread, and a Python callback there
may run the garbage collector, which aborts the process if it frees another client
(confluent-kafka-python PR 2131; it happened here in a test run).

One pass at a time in a member. Members' passes still overlap (each leaving member runs a final
one beside the leader's, and a new leader's first pass can meet a departing one's): the record
keeps every offset named lately beside the new one
(:func:`coordinator.incarnations.with_commit`), so Kafka holds one of them whichever commit lands
last, and forgets one only ``SETTLE_AFTER_S`` after it was named. The pass's client bounds its
requests (``socket.timeout.ms``) well below that, so a commit is never still on its way when
its offset is forgotten.

Unchanged offsets are committed again every hour or quarter of the brokers' offset retention,
whichever is shorter (:mod:`keyshared.kafka.offset_retention`), and at a new leader's first
pass: members only ``assign()``, so Kafka sees a group without members and expires each offset
``offsets.retention.minutes`` after its last commit, even while the group runs. A quiet
partition's offset would go, lag tools would lose the group there, and a leader that joined
since could not tell the absence from an operator's reset (:mod:`keyshared.modes.topic_watch`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError

from coordinator.cursors import Cursor, delete_superseded, read_cursors
from coordinator.incarnations import TopicRecords
from coordinator.layout import GroupLayout
from keyshared.core.types import TP
from keyshared.kafka.client_config import client_properties
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.kafka.log_ends import log_end
from keyshared.kafka.offset_retention import OffsetRetention
from keyshared.modes.range_cursors import low_watermarks
from keyshared.modes.topic_watch import TopicWatch

__all__ = ["LowWatermarkPass"]

log = logging.getLogger(__name__)

EVERY_S = 5.0  # seconds between two passes that committed
PASS_TIMEOUT_S = 5.0  # bound of each Kafka request of a pass
# How long a commit can be on its way is bounded here, for SETTLE_AFTER_S: each request send
# (librdkafka sends a commit three times at most), the wait for the group's coordinator, and
# the age of the read of Kafka past which a pass neither names nor commits.
_SOCKET_TIMEOUT_MS = 5000
_COORDINATOR_WAIT_MS = 6000
_READ_OUTLIVED_S = 10.0
FAILING_WARN_S = 30.0  # passes failing this long in a row are a warning (then every as long)


class LowWatermarkPass:
    """The leader's periodic pass (see the module docstring).

    :param watch: the member's topic watch (topics, ids, the admin client).
    :param client: the member's kazoo client.
    :param layout: the group's paths.
    :param kafka_config: the consumer's config: its group, connection and security.
    """

    def __init__(
        self,
        watch: TopicWatch,
        client: KazooClient,
        layout: GroupLayout,
        kafka_config: Mapping[str, Any],
    ) -> None:
        self._watch = watch
        self._client = client
        self._layout = layout
        self._records = TopicRecords(client, layout)
        self._config = {
            **client_properties(kafka_config),
            "group.id": kafka_config["group.id"],
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # A commit must land or fail well within SETTLE_AFTER_S of its naming. The pass
            # only assign()s: no group session is kept, this bounds the coordinator wait.
            "socket.timeout.ms": _SOCKET_TIMEOUT_MS,
            "session.timeout.ms": _COORDINATOR_WAIT_MS,
        }
        self._consumer: KafkaConsumer | None = None  # made and used on the pass's thread only
        self._thread: threading.Thread | None = None
        self._next = 0.0
        self._failing_since: float | None = None  # of the current run of failed passes
        # when unchanged offsets were last committed again (monotonic; -inf: at the first pass)
        self._refreshed_at = -math.inf
        self._retention = OffsetRetention(kafka_config)  # read when the first pass is due
        self._retention_read = False
        self._warned_at = 0.0
        self._commit_failed = False  # the last pass named a commit that failed

    def due(self) -> None:
        """Start a pass if one is due and none runs (poll thread; never waits). Until the first
        one lands a pass is due at every call: before it, lag tools do not know the group."""
        if self._running() or time.monotonic() < self._next:
            return
        if not self._retention_read:  # only a member that leads passes needs it
            self._retention_read = True
            self._retention.start()
        self._start(self._periodic)

    def final(self, run: bool, wait: float = 3 * PASS_TIMEOUT_S) -> None:
        """When the member leaves, after its final cursors: the last pass (``run``; the last
        member to leave brings Kafka up to every range's cursor), then the pass's client is
        closed. Waits ``wait`` seconds at most for each pass (one still running first: it
        would only repeat it); one that Kafka leaves unanswered is given up, logged, with its
        client."""
        if not self._joined(wait):
            return
        self._start(self._leaving if run else self._close)
        self._joined(wait)

    def _joined(self, wait: float) -> bool:
        thread = self._thread
        if thread is not None:
            thread.join(wait)
            if thread.is_alive():
                log.warning("the low-watermark pass still waits for Kafka after %gs", wait)
                return False
        return True

    def _start(self, body: Any) -> None:
        self._thread = threading.Thread(target=body, name="keyshared-low-watermark", daemon=True)
        self._thread.start()

    def _running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _periodic(self) -> None:
        committed = self.run()
        # A failed commit was named in the topic's record first: passes that keep failing
        # must not name one a second (the record keeps each for SETTLE_AFTER_S).
        wait = committed or self._commit_failed
        self._next = time.monotonic() + (EVERY_S if wait else 0.0)

    def _leaving(self) -> None:
        try:
            self.run(leaving=True)
        finally:
            self._close()

    def _close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close()

    def run(self, leaving: bool = False) -> bool:
        """One pass: bring the group's Kafka offsets up to its ranges' cursors, naming each
        commit in the topic's record first; collect the cursors that stopped counting (another
        incarnation, or superseded). False when nothing could be committed.

        A commit is named in the record in front of the offsets named before it and what Kafka
        held. A pass forgets each offset other than the one Kafka is seen holding once it was
        named ``SETTLE_AFTER_S`` ago (:func:`coordinator.incarnations.settled`). When the last
        member leaves (``leaving``, nobody else is left to commit or read) the record is
        settled at once: a reset to an offset Kafka held before its final commit must show.
        """
        watch = self._watch
        try:
            last = leaving and len(self._client.get_children(self._layout.members)) <= 1
            read_at, seen_at = time.monotonic(), time.time()
            committed, records = watch.reconciled(self._committed)
            self._settle(committed, seen_at)
            valid, stale = watch.split(read_cursors(self._client, self._layout), records)
            _delete(self._client, self._layout, stale)
            delete_superseded(self._client, self._layout, valid)
            offsets = low_watermarks(valid)
        except Exception as exc:
            self._failed("reading cursors", exc)
            return False
        if not offsets:
            self._failing_since = None  # read through; nothing to commit
            return False
        # The interval as of now: the retention is read beside the first pass, and may land after
        # it (an interval fixed then would stay the hourly default).
        refresh = time.monotonic() - self._refreshed_at >= self._retention.refresh_every
        todo = [
            tp for tp in offsets if refresh or committed.get((tp.topic, tp.partition)) != tp.offset
        ]
        allowed: list[TopicPartition] = []
        try:
            todo = self._within_logs(todo)
            for topic in sorted({tp.topic for tp in todo}):
                if self._outlived(read_at):
                    return False
                mine = {tp.partition: tp.offset for tp in todo if tp.topic == topic}
                held = {p: committed.get((topic, p), -1) for p in mine}
                topic_id = watch.described.get(topic, ("", 0))[0]
                if self._records.commit(topic, topic_id, mine, held):
                    allowed += [tp for tp in todo if tp.topic == topic]
            if allowed:
                if self._outlived(read_at):
                    return False
                # Waited for: the next pass must know which of the offsets named Kafka holds.
                self._commit_failed = True
                self._commit(allowed)
                self._commit_failed = False
            if refresh:
                self._refreshed_at = time.monotonic()
            if last:
                done = {(tp.topic, tp.partition): tp.offset for tp in allowed}
                self._settle({**committed, **done}, at_once=True)
        except Exception as exc:
            self._commit_failed |= bool(allowed)  # named (some topics), never landed
            self._failed("committing", exc)
            return False
        self._failing_since = None
        return True

    def _outlived(self, read_at: float) -> bool:
        """Whether the pass's read of Kafka is too old to name or send a commit from: what
        Kafka held then is named beside the commit, and an offset named (or a commit sent) this
        late could outlive its naming (coordinator.incarnations.SETTLE_AFTER_S). Next pass."""
        age = time.monotonic() - read_at
        if age <= _READ_OUTLIVED_S:
            return False
        # A failure like any other (warned when it lasts), and backed off: a pass that names
        # nothing again and again leaves the group's Kafka offsets where they are.
        self._commit_failed = True
        self._failed("naming", TimeoutError(f"the pass's read of Kafka is {age:.1f}s old"))
        return True

    def _failed(self, step: str, exc: Exception) -> None:
        """One failed pass is a debug line (a broker restarting fails a few); failures that
        last are a warning every ``FAILING_WARN_S``: the group's Kafka offsets, which lag tools
        read, stand still meanwhile, and a pass failing at every try must not go unseen."""
        log.debug("%s for the low watermark failed: %s", step, exc)
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = self._warned_at = now
        elif now - self._warned_at >= FAILING_WARN_S:
            self._warned_at = now
            log.warning(
                "the low-watermark pass has failed for %.0fs (last: %s: %s); the group's Kafka "
                "offsets stay where they are until it succeeds",
                now - self._failing_since,
                step,
                exc,
            )

    # -- Kafka, through the pass's own consumer (on the pass's thread) --------------------------

    def _kafka(self) -> KafkaConsumer:
        if self._consumer is None:
            self._consumer = Consumer(self._config)
        return self._consumer

    def _committed(self) -> dict[TP, int]:
        wanted = [TopicPartition(t, p) for t, p in self._watch.partitions()]
        offsets: dict[TP, int] = {}
        for tp in self._kafka().committed(wanted, timeout=PASS_TIMEOUT_S):
            if tp.error is not None:
                raise KafkaException(tp.error)
            offsets[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
        return offsets

    def _within_logs(self, offsets: list[TopicPartition]) -> list[TopicPartition]:
        """``offsets`` without those above their partition's end: a cursor of an older
        incarnation of the topic, read before this member saw it recreated. Committed, it
        would be where the group starts reading the new topic."""
        kept = []
        for tp in offsets:
            high = log_end(self._kafka(), TopicPartition(tp.topic, tp.partition), PASS_TIMEOUT_S)
            if tp.offset <= high:
                kept.append(tp)
            else:
                log.warning(
                    "not committing %s[%d]@%d: the partition ends at %d (topic recreated?)",
                    tp.topic,
                    tp.partition,
                    tp.offset,
                    high,
                )
        return kept

    def _commit(self, offsets: list[TopicPartition]) -> None:
        for tp in self._kafka().commit(offsets=offsets, asynchronous=False) or []:
            if tp.error is not None:
                raise KafkaException(tp.error)

    def _settle(
        self, committed: dict[TP, int], seen_at: float | None = None, at_once: bool = False
    ) -> None:
        for topic, (topic_id, _) in self._watch.described.items():
            held = {p: o for (t, p), o in committed.items() if t == topic and o >= 0}
            if held:
                self._records.settle(topic, topic_id, held, seen_at, at_once)


def _delete(client: KazooClient, layout: GroupLayout, cursors: list[Cursor]) -> None:
    """Delete cursors of another incarnation (each only if unchanged since read), and their
    range directories if that empties them. Pipelined."""
    deletes = [
        client.delete_async(layout.cursor(c.slots, c.topic, c.partition), version=c.data_version)
        for c in cursors
        if c.data_version >= 0
    ]
    for result in deletes:
        with contextlib.suppress(NoNodeError, BadVersionError):
            result.get()
    for slots in {c.slots for c in cursors}:
        with contextlib.suppress(NoNodeError, NotEmptyError):
            client.delete(layout.cursor_range(slots))
    if cursors:
        log.info("collected %d cursor(s) of another topic incarnation", len(cursors))
