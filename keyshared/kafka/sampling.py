"""The poll loop's once-a-second look at its partitions: gauges, stuck records, health.

Sampled, never per record: the gauges, the oldest unfinished record of each partition (for the
health probes and the stuck-record warning), and the split-key report.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping

from confluent_kafka import KafkaException, TopicPartition

from keyshared.core.health import StuckPartition
from keyshared.core.redaction import shown_key
from keyshared.core.types import TP
from keyshared.core.window import CursorBlocker
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.kafka.split_keys import SplitKeyReport
from keyshared.metrics import ConsumerMetrics
from keyshared.runtime.dispatcher import Dispatcher
from keyshared.runtime.partition import PartitionState
from keyshared.settings import ConsumerOptions

__all__ = ["LoopSampler"]

log = logging.getLogger(__name__)

_HOT_KEY_WINDOW = 60.0  # seconds of traffic the busiest/slowest key sketches cover


class LoopSampler:
    """Refreshes the gauges from the live partition states (poll thread)."""

    def __init__(
        self,
        consumer: KafkaConsumer,
        dispatcher: Dispatcher,
        metrics: ConsumerMetrics,
        options: ConsumerOptions,
        worker_depths: Callable[[], list[int]],
    ) -> None:
        self._consumer = consumer
        self._dispatcher = dispatcher
        self._metrics = metrics
        self._options = options
        self._worker_depths = worker_depths
        self._split_keys = SplitKeyReport(metrics, options.redact)
        # Per partition, the offset last reported stuck: each stuck record is logged once.
        self._reported_stuck: dict[TP, int] = {}

    def sample(
        self, states: Mapping[TP, PartitionState], paused: Collection[TP]
    ) -> tuple[StuckPartition, ...]:
        """Refresh the gauges; returns each partition's oldest unfinished record."""
        # First: whatever the gauges below show as admitted has been checked for split keys.
        self._split_keys.drain(self._dispatcher.split_keys)
        for worker, depth in enumerate(self._worker_depths()):
            self._metrics.worker_queue_depth(worker, depth)
        self._metrics.set_holds(self._dispatcher.holds())
        now = time.monotonic()
        oldest: list[StuckPartition] = []
        for state in list(states.values()):
            try:
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(state.topic, state.partition), cached=True
                )
                if high >= 0:
                    state.high_watermark = high
            except KafkaException:
                pass
            figures = self._dispatcher.figures(state, now)
            blocker = figures.blocker
            cursor = figures.safe_cursor
            state.metrics.update(
                in_flight=figures.in_flight,
                waiting=figures.waiting,
                busy_keys=figures.busy_keys,
                blocked_keys=figures.blocked_keys,
                paused=state.tp in paused,
                safe_cursor=cursor if cursor is not None else (state.committed or 0),
                committed=state.committed,
                high_watermark=state.high_watermark,
                oldest_incomplete_age=blocker.age if blocker else 0.0,
                hot_key_share=state.stats.hot_key_share(),
            )
            if blocker is not None:
                oldest.append(StuckPartition(*state.tp, blocker.offset, blocker.age))
                if blocker.age >= self._options.stuck_after:
                    self._report_stuck(state, blocker)
            if now - state.stats.since > _HOT_KEY_WINDOW:
                # The sketches describe recent traffic, not the partition's whole history.
                state.stats.reset(now)
        return tuple(oldest)

    def forget(self, tp: TP) -> None:
        self._reported_stuck.pop(tp, None)

    def _report_stuck(self, state: PartitionState, blocker: CursorBlocker) -> None:
        """Warn once per record that holds the partition's committed offset past ``stuck_after``.

        Sampled with the gauges (the oldest-incomplete age is the metric), so it costs nothing
        per record; the record's key goes through the redaction hook like any logged key.
        """
        if self._reported_stuck.get(state.tp) == blocker.offset:
            return
        self._reported_stuck[state.tp] = blocker.offset
        log.warning(
            "stuck record: %s[%d]@%d key=%s %s for %.0fs (stuck_after=%gs); the committed "
            "offset of %s[%d] holds at %d until it finishes",
            state.topic,
            state.partition,
            blocker.offset,
            shown_key(blocker.key, self._options.redact),
            "has been in flight" if blocker.in_flight else "has been waiting for dispatch",
            blocker.age,
            self._options.stuck_after,
            state.topic,
            state.partition,
            blocker.offset,
        )
