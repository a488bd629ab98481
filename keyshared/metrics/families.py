"""Every Prometheus metric keyshared exports, defined once, in one place.

Why one module: an operator reading the dashboard, the alert rules in ``docs/operations.md`` and
the code should find a metric's name, type, labels and meaning side by side; and a family must be
registered exactly once per process, which module-level objects guarantee. Several consumers in
one process share these families and are told apart by the ``member`` label.

Label discipline: only bounded values — ``group``, ``member``, ``topic``, ``partition``,
``worker``, a DLQ topic, or a small fixed enum (``kind``, ``outcome``, ``state``). Never a message
key: keys are unbounded and would explode the series count; hot keys are exposed as JSON instead
(see :mod:`keyshared.metrics.server`).

Naming follows Prometheus conventions: the ``keyshared_`` prefix, base units (seconds, bytes),
counters named without ``_total`` here because prometheus-client appends it in the exposition.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

__all__ = [
    "COMMIT_OUTCOMES",
    "CONSUMER_FAMILIES",
    "COORDINATOR_FAMILIES",
    "DRAIN_BUCKETS",
    "LATENCY_BUCKETS",
    "PARTITION_COUNTERS",
    "PARTITION_FAMILIES",
    "PARTITION_GAUGES",
    "PARTITION_HISTOGRAMS",
    "PARTITION_LABELS",
    "REBALANCE_KINDS",
    "SESSION_STATES",
    "consumer",
    "coordinator",
    "partition",
]

PREFIX = "keyshared"
PARTITION_LABELS = ("group", "member", "topic", "partition")
MEMBER_LABELS = ("group", "member")

# Handler and end-to-end latency: a fast handler takes about a millisecond, a slow one or a
# retried record tens of seconds; beyond a minute the exact value no longer changes the action.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
# A drain waits for in-flight handlers of a revoked partition: usually sub-second, bounded by the
# drain timeout (minutes at most).
DRAIN_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

REBALANCE_KINDS = ("assigned", "revoked", "lost")
COMMIT_OUTCOMES = ("ok", "failed")
SESSION_STATES = ("connected", "suspended", "lost", "closed")


def _counter(name: str, doc: str, labels: tuple[str, ...] = PARTITION_LABELS) -> Counter:
    return Counter(f"{PREFIX}_{name}", doc, labels, registry=REGISTRY)


def _gauge(name: str, doc: str, labels: tuple[str, ...] = PARTITION_LABELS) -> Gauge:
    return Gauge(f"{PREFIX}_{name}", doc, labels, registry=REGISTRY)


class partition:
    """Per-partition families, labelled ``group, member, topic, partition``."""

    received = _counter("records_received", "Records fetched from Kafka and admitted.")
    processed = _counter("records_processed", "Records whose handler finished successfully.")
    failed = _counter("records_failed", "Handler attempts that raised (each attempt counts).")
    retried = _counter("records_retried", "Records scheduled for another attempt after failing.")
    dropped = _counter("records_dropped", "Records given up on and skipped (poison policy drop).")
    dead_lettered = _counter(
        "records_dead_lettered", "Records written to the DLQ and acknowledged by the broker."
    )
    parked = _counter(
        "records_parked", "Records dead-lettered because their key is parked (policy park)."
    )
    filtered = _counter("records_filtered", "Records skipped because no key filter accepts them.")
    skipped_done = _counter(
        "records_skipped_done",
        "Records skipped because commit metadata says they finished before a restart.",
    )
    handler_seconds = Histogram(
        f"{PREFIX}_handler_duration_seconds",
        "Wall time of one handler attempt.",
        PARTITION_LABELS,
        buckets=LATENCY_BUCKETS,
        registry=REGISTRY,
    )
    end_to_end_seconds = Histogram(
        f"{PREFIX}_end_to_end_latency_seconds",
        "From the record's Kafka timestamp to the end of its successful handling.",
        PARTITION_LABELS,
        buckets=LATENCY_BUCKETS,
        registry=REGISTRY,
    )
    in_flight = _gauge("partition_in_flight", "Records currently inside a handler.")
    waiting = _gauge("partition_waiting", "Records queued behind an in-flight record of their key.")
    busy_keys = _gauge("partition_busy_keys", "Keys with a record in flight.")
    blocked_keys = _gauge(
        "partition_blocked_keys", "Keys held by the block or park policy until released."
    )
    paused = _gauge("partition_paused", "1 while fetching from the partition is paused.")
    safe_cursor = _gauge(
        "partition_safe_cursor_offset", "Offset below which every received record is finished."
    )
    committed = _gauge("partition_committed_offset", "Last offset committed to Kafka.")
    high_watermark = _gauge(
        "partition_high_watermark_offset", "Partition high watermark (next offset to be written)."
    )
    lag = _gauge(
        "partition_lag",
        "Records not yet committed: high watermark minus committed offset (or the safe cursor "
        "before the first commit).",
    )
    oldest_incomplete_age = _gauge(
        "partition_oldest_incomplete_age_seconds",
        "Age of the oldest unfinished record: how long the cursor has been held back.",
    )
    hot_key_share = _gauge(
        "partition_hot_key_share", "Share (0..1) of recent traffic taken by the busiest key."
    )


class consumer:
    """Per-member families, labelled ``group, member`` plus a bounded extra label."""

    rebalances = _counter(
        "rebalances",
        "Rebalance callbacks, by kind (assigned, revoked, lost).",
        (*MEMBER_LABELS, "kind"),
    )
    commits = _counter(
        "commits", "Offset commits, by outcome (ok, failed).", (*MEMBER_LABELS, "outcome")
    )
    metadata_size = _gauge(
        "commit_metadata_size_bytes",
        "Size of the last commit metadata (finished offsets above the cursor).",
        MEMBER_LABELS,
    )
    metadata_overflows = _counter(
        "commit_metadata_overflows",
        "Commits whose metadata did not fit: some finished offsets will be redone after a restart.",
        MEMBER_LABELS,
    )
    metadata_left_out = _gauge(
        "commit_metadata_left_out_offsets",
        "Finished offsets the last commit's metadata could not carry (redone after a crash).",
        MEMBER_LABELS,
    )
    drain_seconds = Histogram(
        f"{PREFIX}_drain_duration_seconds",
        "Time to finish in-flight records of revoked partitions before letting them go.",
        MEMBER_LABELS,
        buckets=DRAIN_BUCKETS,
        registry=REGISTRY,
    )
    drain_timeouts = _counter(
        "drain_timeouts",
        "Drains that hit the drain timeout with records still in flight.",
        MEMBER_LABELS,
    )
    dlq_writes = _counter(
        "dlq_writes", "DLQ writes acknowledged by the broker.", (*MEMBER_LABELS, "dlq_topic")
    )
    dlq_write_failures = _counter(
        "dlq_write_failures",
        "DLQ writes the broker did not acknowledge (the source offset stays unfinished).",
        (*MEMBER_LABELS, "dlq_topic"),
    )
    producer_fenced = _counter(
        "transactional_producer_fenced",
        "Exactly-once: fences of the transactional producer (another process initialised its "
        "transactional.id, or the broker timed out its transaction); a second one within a "
        "minute stops the member.",
        MEMBER_LABELS,
    )
    worker_queue_depth = _gauge(
        "worker_queue_depth",
        "Records dispatched to a worker and not yet started.",
        (*MEMBER_LABELS, "worker"),
    )
    paused_partitions = _gauge(
        "paused_partitions", "Assigned partitions currently paused for backpressure.", MEMBER_LABELS
    )
    held_output_bytes = _gauge(
        "held_output_bytes",
        "Exactly-once: bytes of finished records' outputs waiting for a transaction; at "
        "max_held_output_bytes fetching pauses for the partitions holding them.",
        MEMBER_LABELS,
    )
    workers = _gauge("workers", "Worker threads (or async tasks) of the member.", MEMBER_LABELS)
    dispatch_hold_seconds = _gauge(
        "dispatch_hold_seconds",
        "How long each named hold on dispatch has been in place (0: lifted); while any is, "
        "no handler starts.",
        (*MEMBER_LABELS, "hold"),
    )
    split_keys = _counter(
        "keys_split_across_partitions",
        "Sampled keys seen in two partitions of one topic: producers with different "
        "partitioners (CRC32 vs murmur2) or added partitions; per-key order is broken.",
        (*MEMBER_LABELS, "topic"),
    )


class coordinator:
    """ZooKeeper coordinator families, labelled ``group, member`` (plus ``topic`` for slots)."""

    session_state = _gauge(
        "coordinator_session_state",
        "1 for the member's current ZooKeeper session state, 0 for the others.",
        (*MEMBER_LABELS, "state"),
    )
    session_losses = _counter(
        "coordinator_session_losses",
        "ZooKeeper sessions lost (expired or closed by the server).",
        MEMBER_LABELS,
    )
    generation = _gauge(
        "coordinator_generation", "Assignment generation the member last applied.", MEMBER_LABELS
    )
    owned_ranges = _gauge(
        "coordinator_owned_ranges", "Slot ranges owned by the member.", (*MEMBER_LABELS, "topic")
    )
    owned_slots = _gauge(
        "coordinator_owned_slots",
        "Slots (of 65536) owned by the member.",
        (*MEMBER_LABELS, "topic"),
    )
    pending_drains = _gauge(
        "coordinator_pending_drains",
        "Ranges or partitions this member waits for another member to drain.",
        MEMBER_LABELS,
    )
    handover_wait_seconds = Histogram(
        f"{PREFIX}_coordinator_handover_wait_seconds",
        "Time a newly owned range or partition waited for the previous owner's drain or lease.",
        MEMBER_LABELS,
        buckets=DRAIN_BUCKETS,
        registry=REGISTRY,
    )
    fencing_events = _counter(
        "coordinator_fencing_events",
        "Writes or commits refused because the member's lease or generation was stale.",
        MEMBER_LABELS,
    )
    holdings = _gauge(
        "holdings",
        "Leases, ranges or the exclusive lock this member has in each phase of their life "
        "cycle (waiting, active, draining, handing_back; released ones are gone).",
        (*MEMBER_LABELS, "mode", "phase"),
    )


PARTITION_COUNTERS = (
    partition.received,
    partition.processed,
    partition.failed,
    partition.retried,
    partition.dropped,
    partition.dead_lettered,
    partition.parked,
    partition.filtered,
    partition.skipped_done,
)
PARTITION_HISTOGRAMS = (partition.handler_seconds, partition.end_to_end_seconds)
PARTITION_GAUGES = (
    partition.in_flight,
    partition.waiting,
    partition.busy_keys,
    partition.blocked_keys,
    partition.paused,
    partition.safe_cursor,
    partition.committed,
    partition.high_watermark,
    partition.lag,
    partition.oldest_incomplete_age,
    partition.hot_key_share,
)
PARTITION_FAMILIES = (*PARTITION_COUNTERS, *PARTITION_HISTOGRAMS, *PARTITION_GAUGES)
CONSUMER_FAMILIES = (
    consumer.rebalances,
    consumer.commits,
    consumer.metadata_size,
    consumer.metadata_overflows,
    consumer.metadata_left_out,
    consumer.drain_seconds,
    consumer.drain_timeouts,
    consumer.dlq_writes,
    consumer.dlq_write_failures,
    consumer.producer_fenced,
    consumer.worker_queue_depth,
    consumer.paused_partitions,
    consumer.held_output_bytes,
    consumer.workers,
    consumer.dispatch_hold_seconds,
    consumer.split_keys,
)
COORDINATOR_FAMILIES = (
    coordinator.session_state,
    coordinator.session_losses,
    coordinator.generation,
    coordinator.owned_ranges,
    coordinator.owned_slots,
    coordinator.pending_drains,
    coordinator.handover_wait_seconds,
    coordinator.fencing_events,
    coordinator.holdings,
)
