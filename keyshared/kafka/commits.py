"""Turns windows into commits: the safe cursor as the offset, finished records as metadata.

Only the poll thread commits, so the committed offset of a partition only ever comes from its
window's safe cursor. Periodic commits are asynchronous and skipped when nothing moved, unless
the last one is ``OFFSET_REFRESH_S`` old; commits on revoke and on shutdown are synchronous,
because after them another member may start.

The refresh is for groups Kafka sees without members (``exclusive`` and ``key_shared`` only
``assign()``): Kafka expires their offsets ``offsets.retention.minutes`` (7 days by default)
after the last commit, running or not, and a partition quiet that long would restart from
``auto.offset.reset`` at the next activation. Hourly suits Kafka's default; a mode whose group
has no Kafka members follows the brokers' own retention instead
(:meth:`Committer.follow_retention`, :mod:`keyshared.kafka.offset_retention`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from keyshared.core.offsets import Encoded, encode_within, stamp_incarnation
from keyshared.core.runs import OffsetRuns
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.runtime.control import DispatchControl
from keyshared.runtime.partition import PartitionState

__all__ = ["OFFSET_REFRESH_S", "Committer"]

log = logging.getLogger(__name__)

OFFSET_REFRESH_S = 3600.0
"""How old an unchanged commit may get before it is sent again: far within Kafka's offset
retention (``offsets.retention.minutes``: 7 days by default, 1 day before Kafka 2.0), at the
cost of one commit per quiet partition an hour."""

# Expected when a periodic commit races a rebalance; the revoke path commits synchronously.
_REBALANCE_CODES = (
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.UNKNOWN_MEMBER_ID,
)


class Committer:
    """Builds and sends offset commits for a set of partition states.

    :param consumer: the confluent-kafka consumer (used from the poll thread only).
    :param metrics: consumer-level metrics (commit outcomes, metadata size and overflow).
    :param dispatcher: whose windows are committed (read in one step per commit).
    :param lookup: the current state of a partition, for commit callbacks.
    :param max_metadata_bytes: the broker's ``offset.metadata.max.bytes`` (default 4096).
    """

    def __init__(
        self,
        consumer: KafkaConsumer,
        metrics: Any,
        dispatcher: DispatchControl,
        lookup: Callable[[tuple[str, int]], PartitionState | None],
        max_metadata_bytes: int = 4000,
    ):
        self._consumer = consumer
        self._lookup = lookup
        self._metrics = metrics
        self._dispatcher = dispatcher
        self._max_metadata_bytes = max_metadata_bytes
        self._sent_at: dict[tuple[str, int], float] = {}  # last commit sent (monotonic)
        self._refresh_every: Callable[[], float] = lambda: OFFSET_REFRESH_S

    def follow_retention(self, refresh_every: Callable[[], float]) -> None:
        """Commit unchanged offsets again every ``refresh_every()`` seconds instead of hourly.

        Caller: a mode whose group has no Kafka members (exclusive with a coordinator), at
        join; :class:`~keyshared.kafka.offset_retention.OffsetRetention` gives the interval.
        Affects: how often :meth:`_offsets` sends an unchanged partition's offset again."""
        self._refresh_every = refresh_every

    def _offsets(
        self,
        states: Iterable[PartitionState],
        skip_unchanged: bool,
        taken: list[tuple[PartitionState, Any]] | None = None,
    ) -> list[TopicPartition]:
        """The commits to send; with ``taken``, the outputs of exactly the records the
        snapshot sees finished are added to it (the exactly-once committer)."""
        offsets = []
        snapshot, outputs = self._dispatcher.commit_snapshot(states, taken is not None)
        if taken is not None:
            taken.extend(outputs)
        now = time.monotonic()
        refresh = self._refresh_every()
        for state, cursor, finished in snapshot:
            metadata = ""
            if finished:
                encoded = self._encode(state, cursor, finished)
                # Longer than the budget: exactly-once's whole set, for a side record.
                overflowed = bool(encoded.left_out) or len(encoded.text) > self._max_metadata_bytes
                size = min(len(encoded.text), self._max_metadata_bytes)
                self._metrics.metadata(size, overflowed, encoded.left_out)
                if encoded.left_out and not state.metadata_overflow_logged:
                    state.metadata_overflow_logged = True  # once per partition assignment
                    log.warning(
                        "%s: %d of %d finished offsets above %d (in %d runs) do not fit the "
                        "commit metadata (%d bytes); %s "
                        "(keyshared_commit_metadata_left_out_offsets)",
                        state,
                        encoded.left_out,
                        len(finished),
                        cursor,
                        finished.run_count,
                        self._max_metadata_bytes,
                        self._left_out_means,
                    )
                metadata = encoded.text
            if taken is None:  # exactly-once commits are not stamped yet (docs/operations.md)
                metadata = stamp_incarnation(metadata, state.topic_id)
            unchanged = skip_unchanged and state.commit_sent == (cursor, metadata)
            if unchanged and now - self._sent_at.get(state.tp, -math.inf) < refresh:
                continue
            state.commit_sent = (cursor, metadata)
            self._sent_at[state.tp] = now
            offsets.append(TopicPartition(state.topic, state.partition, cursor, metadata=metadata))
        return offsets

    _left_out_means = "the ones farthest from the cursor would be redone after a crash"

    def _encode(self, state: PartitionState, cursor: int, finished: OffsetRuns) -> Encoded:
        """The metadata of one commit: the finished runs nearest the cursor that fit.

        Two commits may name different subsets when they overflow; at-least-once allows it
        (an offset named once and not later is at most redone), and naming the runs nearest
        the cursor keeps the metadata about the records the cursor reaches next.
        """
        return encode_within(cursor, finished, self._max_metadata_bytes)

    def starting_points(
        self, partitions: list[tuple[str, int]], timeout: float
    ) -> dict[tuple[str, int], tuple[int | None, str]]:
        """The group's committed offset and metadata of each partition (None: never committed)."""
        committed = self._consumer.committed(
            [TopicPartition(*tp) for tp in partitions], timeout=timeout
        )
        return {
            (tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None, tp.metadata or "")
            for tp in committed
        }

    def leaving(self, partitions: list[tuple[str, int]]) -> None:
        """Nothing to drop: plain commits keep no per-partition work."""

    def commit_async(self, states: Iterable[PartitionState]) -> None:
        """Commit what moved since the last commit sent; the outcome arrives in on_commit."""
        offsets = self._offsets(states, skip_unchanged=True)
        if not offsets:
            return
        try:
            self._consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:
            self._metrics.commit(False)
            self._forget_sent(offsets)
            log.warning("asynchronous commit failed: %s", exc)

    def commit_sync(self, states: Iterable[PartitionState]) -> bool:
        """Commit every partition's cursor now, whatever was sent before (revoke, shutdown).

        Never skipped on the strength of an earlier asynchronous commit: that one may still
        fail (e.g. with ILLEGAL_GENERATION mid-rebalance), and this is the last chance.
        """
        states = list(states)
        offsets = self._offsets(states, skip_unchanged=False)
        if not offsets:
            return True
        try:
            result = self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self._metrics.commit(False)
            log.error("synchronous commit of %s failed: %s", _names(offsets), exc)
            return False
        failed = [tp for tp in result or () if tp.error is not None]
        if failed:
            self._metrics.commit(False)
            log.error("commit failed for %s", ", ".join(f"{tp}: {tp.error}" for tp in failed))
            return False
        self._metrics.commit(True)
        by_tp = {(tp.topic, tp.partition): tp.offset for tp in offsets}
        for state in states:
            if state.tp in by_tp:
                state.committed = by_tp[state.tp]
        return True

    def on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        """librdkafka's commit callback for asynchronous commits (served by poll)."""
        ok = err is None and all(tp.error is None for tp in partitions)
        self._metrics.commit(ok)
        if ok:
            for tp in partitions:
                state = self._lookup((tp.topic, tp.partition))
                if state is not None and tp.offset >= 0:
                    state.committed = tp.offset
            return
        self._forget_sent(partitions)
        code = err.code() if err is not None else None
        if code in _REBALANCE_CODES:
            log.info("asynchronous commit refused during a rebalance (%s); it will be resent", err)
        else:
            log.warning("asynchronous commit failed: %s", err or _names(partitions))

    def _forget_sent(self, partitions: list[TopicPartition]) -> None:
        """Make the next periodic commit resend these partitions."""
        for tp in partitions:
            state = self._lookup((tp.topic, tp.partition))
            if state is not None:
                state.commit_sent = None


def _names(offsets: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in offsets)
