"""The facade the consumer calls: label children bound once, plain method calls afterwards.

Why a facade instead of touching the families directly: the poll loop and the workers should not
know label names or how lag is derived, and looking up a label child costs a dict lookup under a
lock — fine once per assignment, wasteful per record. :class:`PartitionMetrics` holds the bound
children, so the per-record path is one ``inc()`` or ``observe()``.

Example::

    metrics = ConsumerMetrics(group="orders", member="orders-1")
    p0 = metrics.partition("orders", 0)
    p0.received.inc()
    p0.handler_seconds.observe(0.004)
    p0.update(in_flight=3, waiting=10, busy_keys=3, blocked_keys=0, paused=False,
              safe_cursor=120, committed=118, high_watermark=500,
              oldest_incomplete_age=0.2, hot_key_share=0.05)
    metrics.forget_partition("orders", 0)   # on revoke
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from prometheus_client import Counter, Gauge, Histogram

from keyshared.metrics.families import (
    COMMIT_OUTCOMES,
    CONSUMER_FAMILIES,
    PARTITION_FAMILIES,
    REBALANCE_KINDS,
    consumer,
    partition,
)

__all__ = ["ConsumerMetrics", "PartitionMetrics"]


class PartitionMetrics:
    """The series of one assigned partition, bound to ``group, member, topic, partition``.

    Counter and histogram attributes are prometheus-client label children: call ``.inc()`` or
    ``.observe(seconds)`` on them from any thread.
    """

    received: Counter
    processed: Counter
    failed: Counter
    retried: Counter
    dropped: Counter
    dead_lettered: Counter
    parked: Counter
    filtered: Counter
    skipped_done: Counter
    handler_seconds: Histogram
    end_to_end_seconds: Histogram

    def __init__(self, group: str, member: str, topic: str, partition_id: int) -> None:
        """Bind (and so create, at zero) every per-partition series.

        Creating the counters at zero up front is deliberate: ``rate()`` and alerts see the first
        failure as an increase instead of a series appearing from nowhere.

        :param group: consumer group id.
        :param member: this member's id (distinguishes consumers sharing a process).
        :param topic: the partition's topic.
        :param partition_id: the partition number.
        """
        labels = (group, member, topic, str(partition_id))
        self.labels = labels
        self.received = partition.received.labels(*labels)
        self.processed = partition.processed.labels(*labels)
        self.failed = partition.failed.labels(*labels)
        self.retried = partition.retried.labels(*labels)
        self.dropped = partition.dropped.labels(*labels)
        self.dead_lettered = partition.dead_lettered.labels(*labels)
        self.parked = partition.parked.labels(*labels)
        self.filtered = partition.filtered.labels(*labels)
        self.skipped_done = partition.skipped_done.labels(*labels)
        self.handler_seconds = partition.handler_seconds.labels(*labels)
        self.end_to_end_seconds = partition.end_to_end_seconds.labels(*labels)
        self._in_flight = partition.in_flight.labels(*labels)
        self._waiting = partition.waiting.labels(*labels)
        self._busy_keys = partition.busy_keys.labels(*labels)
        self._blocked_keys = partition.blocked_keys.labels(*labels)
        self._paused = partition.paused.labels(*labels)
        self._safe_cursor = partition.safe_cursor.labels(*labels)
        self._oldest_age = partition.oldest_incomplete_age.labels(*labels)
        self._hot_key_share = partition.hot_key_share.labels(*labels)
        # Offsets Kafka has not told us yet stay absent rather than exported as a false 0.
        self._committed: Gauge | None = None
        self._high_watermark: Gauge | None = None
        self._lag: Gauge | None = None

    def update(
        self,
        *,
        in_flight: int,
        waiting: int,
        busy_keys: int,
        blocked_keys: int,
        paused: bool,
        safe_cursor: int,
        committed: int | None,
        high_watermark: int | None,
        oldest_incomplete_age: float,
        hot_key_share: float,
    ) -> None:
        """Set the partition's gauges; the poll loop calls this about once a second.

        Lag is ``high_watermark - committed``, or ``high_watermark - safe_cursor`` before the
        first commit, floored at zero; it is not exported until the high watermark is known.
        """
        self._in_flight.set(in_flight)
        self._waiting.set(waiting)
        self._busy_keys.set(busy_keys)
        self._blocked_keys.set(blocked_keys)
        self._paused.set(1 if paused else 0)
        self._safe_cursor.set(safe_cursor)
        self._oldest_age.set(oldest_incomplete_age)
        self._hot_key_share.set(hot_key_share)
        if committed is not None:
            if self._committed is None:
                self._committed = partition.committed.labels(*self.labels)
            self._committed.set(committed)
        if high_watermark is not None:
            if self._high_watermark is None:
                self._high_watermark = partition.high_watermark.labels(*self.labels)
                self._lag = partition.lag.labels(*self.labels)
            self._high_watermark.set(high_watermark)
            base = committed if committed is not None else safe_cursor
            assert self._lag is not None
            self._lag.set(max(0, high_watermark - base))


class ConsumerMetrics:
    """All series of one consumer group member.

    :param group: consumer group id (``group.id``).
    :param member: a name unique within the process and stable across restarts if possible
        (e.g. ``client.id``), so dashboards can follow one member.
    """

    def __init__(self, group: str, member: str) -> None:
        self.group = group
        self.member = member
        self._labels = (group, member)
        self._lock = threading.Lock()
        self._partitions: dict[tuple[str, int], PartitionMetrics] = {}
        self._workers: dict[int, Gauge] = {}
        self._dlq_topics: set[str] = set()
        self._holds: set[str] = set()
        for kind in REBALANCE_KINDS:
            consumer.rebalances.labels(group, member, kind)
        for outcome in COMMIT_OUTCOMES:
            consumer.commits.labels(group, member, outcome)
        consumer.metadata_overflows.labels(group, member)
        consumer.drain_seconds.labels(group, member)
        consumer.drain_timeouts.labels(group, member)
        self._metadata_size = consumer.metadata_size.labels(group, member)
        self._metadata_left_out = consumer.metadata_left_out.labels(group, member)
        self._paused_partitions = consumer.paused_partitions.labels(group, member)
        self._held_output_bytes = consumer.held_output_bytes.labels(group, member)
        self._workers_gauge = consumer.workers.labels(group, member)

    def partition(self, topic: str, partition: int) -> PartitionMetrics:
        """The series of one partition, created on first use and cached until forgotten."""
        key = (topic, partition)
        found = self._partitions.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._partitions.get(key)
            if found is None:
                found = PartitionMetrics(self.group, self.member, topic, partition)
                self._partitions[key] = found
            return found

    def forget_partition(self, topic: str, partition: int) -> None:
        """Remove a revoked partition's series so a former owner does not report stale lag."""
        with self._lock:
            self._partitions.pop((topic, partition), None)
        selector = {
            "group": self.group,
            "member": self.member,
            "topic": topic,
            "partition": str(partition),
        }
        for family in PARTITION_FAMILIES:
            family.remove_by_labels(selector)

    def rebalance(self, kind: str) -> None:
        """Count a rebalance callback; ``kind`` is ``assigned``, ``revoked`` or ``lost``."""
        if kind not in REBALANCE_KINDS:
            raise ValueError(f"rebalance kind must be one of {REBALANCE_KINDS}, got {kind!r}")
        consumer.rebalances.labels(*self._labels, kind).inc()

    def commit(self, ok: bool) -> None:
        """Count one offset commit and whether the broker accepted it."""
        consumer.commits.labels(*self._labels, "ok" if ok else "failed").inc()

    def metadata(self, size_bytes: int, overflow: bool, left_out: int = 0) -> None:
        """Record the size of the commit metadata sent, whether it had to be truncated, and
        how many finished offsets it left out (those are redone after a crash)."""
        self._metadata_size.set(size_bytes)
        self._metadata_left_out.set(left_out)
        if overflow:
            consumer.metadata_overflows.labels(*self._labels).inc()

    def drain(self, seconds: float, timed_out: bool) -> None:
        """Record how long a drain of revoked partitions took, and whether it gave up."""
        consumer.drain_seconds.labels(*self._labels).observe(seconds)
        if timed_out:
            consumer.drain_timeouts.labels(*self._labels).inc()

    def expect_topic(self, topic: str) -> None:
        """Create a subscribed topic's member-level series at zero (split keys)."""
        consumer.split_keys.labels(*self._labels, topic)

    def keys_split(self, topic: str, count: int = 1) -> None:
        """Count sampled keys of ``topic`` found in a second partition."""
        consumer.split_keys.labels(*self._labels, topic).inc(count)

    def expect_dlq(self, dlq_topic: str) -> None:
        """Create a DLQ topic's series at zero before its first dead letter, so the DLQ panels
        and alerts of a healthy member read 0 instead of "no data"."""
        self._touch_dlq(dlq_topic)

    def dlq_written(self, dlq_topic: str) -> None:
        """Count a DLQ write the broker acknowledged."""
        self._touch_dlq(dlq_topic)
        consumer.dlq_writes.labels(*self._labels, dlq_topic).inc()

    def dlq_write_failed(self, dlq_topic: str) -> None:
        """Count a DLQ write the broker refused or that timed out."""
        self._touch_dlq(dlq_topic)
        consumer.dlq_write_failures.labels(*self._labels, dlq_topic).inc()

    def producer_fenced(self, count: int = 1) -> None:
        """Count a fence of the exactly-once producer (another process took its id); 0
        creates the series at zero, so an alert on it reads 0 rather than "no data"."""
        consumer.producer_fenced.labels(*self._labels).inc(count)

    def worker_queue_depth(self, worker: int, depth: int) -> None:
        """Set how many records wait in one worker's queue."""
        gauge = self._workers.get(worker)
        if gauge is None:
            with self._lock:
                gauge = self._workers.setdefault(
                    worker, consumer.worker_queue_depth.labels(*self._labels, str(worker))
                )
        gauge.set(depth)

    def declare_holds(self, names: Iterable[str]) -> None:
        """Create the series of holds this member may take, at 0, so that a dashboard and an
        alert see "no hold" rather than no data until the first one is taken."""
        self.set_holds({name: 0.0 for name in names})

    def set_holds(self, holds: Mapping[str, float]) -> None:
        """Set each hold's age; a hold seen before and lifted since reads 0, so its alert
        resolves instead of its series vanishing."""
        with self._lock:
            self._holds.update(holds)
            for name in self._holds:
                age = holds.get(name, 0.0)
                consumer.dispatch_hold_seconds.labels(*self._labels, name).set(age)

    def set_paused_partitions(self, n: int) -> None:
        """Set how many assigned partitions are paused for backpressure."""
        self._paused_partitions.set(n)

    def set_held_output_bytes(self, n: int) -> None:
        """Set how many bytes of exactly-once outputs wait for a transaction."""
        self._held_output_bytes.set(n)

    def set_workers(self, n: int) -> None:
        """Set the worker count; queue-depth series exist (at zero) for exactly those workers,
        from the first scrape on."""
        self._workers_gauge.set(n)
        with self._lock:
            for worker in [w for w in self._workers if w >= n]:
                del self._workers[worker]
                consumer.worker_queue_depth.remove(*self._labels, str(worker))
            for worker in range(n):
                if worker not in self._workers:
                    self._workers[worker] = consumer.worker_queue_depth.labels(
                        *self._labels, str(worker)
                    )

    def close(self) -> None:
        """Remove every series of this member, e.g. when a consumer stops in a long-lived process.

        Counters restart from zero if a member with the same name comes back, which Prometheus'
        ``rate()`` treats as a counter reset — correct, if slightly lossy for the last interval.
        """
        with self._lock:
            self._partitions.clear()
            self._workers.clear()
            self._dlq_topics.clear()
            self._holds.clear()
        selector = {"group": self.group, "member": self.member}
        for family in (*PARTITION_FAMILIES, *CONSUMER_FAMILIES):
            family.remove_by_labels(selector)

    def _touch_dlq(self, dlq_topic: str) -> None:
        # Create both DLQ series together, so "failures" exists (at 0) as soon as a DLQ is used
        # and its alert can fire on the first failure.
        if dlq_topic in self._dlq_topics:
            return
        with self._lock:
            self._dlq_topics.add(dlq_topic)
        consumer.dlq_writes.labels(*self._labels, dlq_topic)
        consumer.dlq_write_failures.labels(*self._labels, dlq_topic)
