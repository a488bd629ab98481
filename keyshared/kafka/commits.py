"""Turns windows into commits: the safe cursor as the offset, finished records as metadata.

Only the poll thread commits, so the committed offset of a partition only ever comes from its
window's safe cursor. Periodic commits are asynchronous and skipped when nothing moved; commits
on revoke and on shutdown are synchronous, because after them another member may start.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from keyshared.core.offsets import encode_finished
from keyshared.kafka.partition import PartitionState

__all__ = ["Committer"]

log = logging.getLogger(__name__)


class Committer:
    """Builds and sends offset commits for a set of partition states.

    :param consumer: the confluent-kafka consumer (used from the poll thread only).
    :param metrics: consumer-level metrics (commit outcomes, metadata size and overflow).
    :param lock: the dispatcher's lock, held while reading windows.
    :param max_metadata_bytes: the broker's ``offset.metadata.max.bytes`` (default 4096).
    """

    def __init__(self, consumer: Any, metrics: Any, lock: Any, max_metadata_bytes: int = 4000):
        self._consumer = consumer
        self._metrics = metrics
        self._lock = lock
        self._max_metadata_bytes = max_metadata_bytes
        self._resend = False  # an asynchronous commit failed: send the next one regardless

    def _offsets(self, states: Iterable[PartitionState], force: bool) -> list[TopicPartition]:
        offsets = []
        with self._lock:
            snapshot = [
                (s, s.window.safe_cursor, s.window.finished_above_cursor())
                for s in states
                if s.window is not None
            ]
        for state, cursor, finished in snapshot:
            metadata = ""
            if finished:
                encoded = encode_finished(cursor, finished, self._max_metadata_bytes)
                self._metrics.metadata(len(encoded or ""), encoded is None)
                if encoded is None:
                    log.warning(
                        "%s: %d finished offsets above %d do not fit the commit metadata; "
                        "they would be redone after a crash",
                        state,
                        len(finished),
                        cursor,
                    )
                metadata = encoded or ""
            if not force and cursor == state.committed and metadata == state.committed_metadata:
                continue
            offsets.append(TopicPartition(state.topic, state.partition, cursor, metadata=metadata))
        return offsets

    def commit_async(self, states: Iterable[PartitionState]) -> None:
        states = list(states)
        offsets = self._offsets(states, force=self._resend)
        self._resend = False
        if not offsets:
            return
        try:
            self._consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:
            self._metrics.commit(False)
            log.warning("asynchronous commit failed: %s", exc)
            return
        self._remember(states, offsets)

    def commit_sync(self, states: Iterable[PartitionState]) -> bool:
        states = list(states)
        offsets = self._offsets(states, force=False)
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
        self._remember(states, offsets)
        return True

    def on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        """librdkafka's commit callback for asynchronous commits (served by poll)."""
        if err is not None:
            self._metrics.commit(False)
            self._resend = True
            log.warning("commit failed: %s", err)
        else:
            self._metrics.commit(True)

    @staticmethod
    def _remember(states: Iterable[PartitionState], offsets: list[TopicPartition]) -> None:
        by_tp = {(tp.topic, tp.partition): tp for tp in offsets}
        for state in states:
            tp = by_tp.get(state.tp)
            if tp is not None:
                state.committed = tp.offset
                state.committed_metadata = tp.metadata or ""


def _names(offsets: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in offsets)
