"""Counts and logs the keys :class:`~keyshared.core.split_keys.SplitKeyDetector` found split.

Why once per topic: a topic written with two partitioners splits thousands of keys; one warning
that names the cause and the fix is what an operator can act on, and the metric
``keyshared_keys_split_across_partitions_total`` carries the count (and drives an alert).
Runs on the poll thread with the gauges, about once a second, never per record.
"""

from __future__ import annotations

import logging

from keyshared.core.redaction import Redactor, shown_key
from keyshared.core.split_keys import SplitKeyDetector
from keyshared.metrics import ConsumerMetrics

__all__ = ["SplitKeyReport"]

log = logging.getLogger(__name__)

FIX = (
    "set partitioner=murmur2_random on every librdkafka-based producer of it (confluent-kafka "
    "Python, Go, .NET, C) so they agree with the Java client's murmur2 default, or use one "
    "partitioner everywhere"
)


class SplitKeyReport:
    """Turns found splits into the metric and one warning per topic.

    :param metrics: the member's metrics.
    :param redact: the consumer's redaction hook, applied to the key in the warning.
    """

    def __init__(self, metrics: ConsumerMetrics, redact: Redactor | None = None) -> None:
        self._metrics = metrics
        self._redact = redact
        self._warned: set[str] = set()

    def drain(self, detector: SplitKeyDetector) -> None:
        """Count and (once per topic) log what ``detector`` found since the last call."""
        for split, count in detector.take():
            self._metrics.keys_split(split.topic, count)
            if split.topic in self._warned:
                continue
            self._warned.add(split.topic)
            first, second = split.partitions
            log.warning(
                "key %s of topic %s arrived in partitions %d and %d: its producers put one key "
                "in several partitions, so per-key order is lost for every consumer of the "
                "topic. Likely cause: producers with different partitioners (librdkafka's "
                "default consistent_random hashes keys with CRC32, the Java client's with "
                "murmur2), or partitions added to the topic. Fix: %s. Logged once per topic; "
                "counted in keyshared_keys_split_across_partitions_total",
                shown_key(split.key, self._redact),
                split.topic,
                first,
                second,
                FIX,
            )
