"""The dashboard's rows and panels: what each shows, and why an operator would look at it.

One call per panel, in reading order: title, the description Grafana shows on hover, and the
queries (built with dashboard_promql.py). Placement and JSON shape are dashboard_layout.py's.
"""

from __future__ import annotations

from dashboard_layout import Json, Layout
from dashboard_promql import RI, M, P, increase, per_partition, quantile, rate

__all__ = ["panels"]


def panels() -> list[Json]:
    g = Layout()
    g.row("Flow")
    g.panel(
        "Throughput",
        "Records admitted from Kafka and records handled successfully, per second.",
        [
            (rate("keyshared_records_received_total", "topic"), "received {{topic}}"),
            (rate("keyshared_records_processed_total", "topic"), "processed {{topic}}"),
        ],
        unit="ops",
    )
    g.panel(
        "Handler latency",
        "Percentiles of one handler attempt's wall time.",
        [
            (quantile(q, "keyshared_handler_duration_seconds"), f"p{int(q * 100)}")
            for q in (0.5, 0.9, 0.99)
        ],
        unit="s",
    )
    g.panel(
        "End-to-end latency",
        "From the record's Kafka timestamp to the end of its handling: includes lag and waiting.",
        [
            (quantile(q, "keyshared_end_to_end_latency_seconds"), f"p{int(q * 100)}")
            for q in (0.5, 0.9, 0.99)
        ],
        unit="s",
    )
    g.row("Backlog and the commit cursor")
    g.panel(
        "Lag per partition",
        "High watermark minus committed offset: records a restart would still have to read.",
        [
            (
                per_partition("keyshared_partition_lag"),
                "{{topic}}/{{partition}}",
            )
        ],
    )
    g.panel(
        "In flight, waiting, busy and blocked keys",
        "Records in a handler, records queued behind their key, keys busy, keys held by policy.",
        [
            (f"sum(keyshared_partition_in_flight{{{P}}})", "in flight"),
            (f"sum(keyshared_partition_waiting{{{P}}})", "waiting"),
            (f"sum(keyshared_partition_busy_keys{{{P}}})", "busy keys"),
            (f"sum(keyshared_partition_blocked_keys{{{P}}})", "blocked keys"),
        ],
    )
    g.panel(
        "Cursor blocker age",
        "Age of the oldest unfinished record per partition: how long the commit has been held.",
        [
            (
                per_partition("keyshared_partition_oldest_incomplete_age_seconds"),
                "{{topic}}/{{partition}}",
            )
        ],
        unit="s",
        thresholds=[("green", None), ("orange", 30), ("red", 300)],
    )
    g.panel(
        "Finished but not yet committed",
        "Safe cursor minus committed offset: work that a crash right now would redo.",
        [
            (
                f"max by (topic, partition) (keyshared_partition_safe_cursor_offset{{{P}}}"
                f" - keyshared_partition_committed_offset{{{P}}})",
                "{{topic}}/{{partition}}",
            )
        ],
    )
    g.panel(
        "Paused partitions and workers",
        "Partitions paused for backpressure (a full window) and the worker count per member.",
        [
            (f"sum by (member) (keyshared_paused_partitions{{{M}}})", "paused {{member}}"),
            (f"sum by (member) (keyshared_partition_paused{{{P}}})", "paused in topic {{member}}"),
            (f"sum by (member) (keyshared_workers{{{M}}})", "workers {{member}}"),
        ],
    )
    g.panel(
        "Worker queue depth",
        "Records dispatched to a worker and not yet started; one hot worker means a hot key.",
        [
            (
                f"max by (member, worker) (keyshared_worker_queue_depth{{{M}}})",
                "{{member}}/{{worker}}",
            )
        ],
    )
    g.row("Failures and dead letters")
    g.panel(
        "Handler failures, retries, drops, parked",
        "Failed attempts, records retried, given up (drop) and parked behind a poisoned key.",
        [
            (rate("keyshared_records_failed_total", "topic"), "failed {{topic}}"),
            (rate("keyshared_records_retried_total", "topic"), "retried {{topic}}"),
            (rate("keyshared_records_dropped_total", "topic"), "dropped {{topic}}"),
            (rate("keyshared_records_parked_total", "topic"), "parked {{topic}}"),
        ],
        unit="ops",
    )
    g.panel(
        "DLQ rate",
        "Records dead-lettered per source topic, and acknowledged writes per DLQ topic.",
        [
            (rate("keyshared_records_dead_lettered_total", "topic"), "dead-lettered {{topic}}"),
            (rate("keyshared_dlq_writes_total", "dlq_topic", M), "written {{dlq_topic}}"),
        ],
        unit="ops",
    )
    g.panel(
        "DLQ write failures",
        "DLQ writes not acknowledged: the source offset stays unfinished and blocks the cursor.",
        [(increase("keyshared_dlq_write_failures_total", "dlq_topic"), "{{dlq_topic}}")],
        thresholds=[("green", None), ("red", 1)],
    )
    g.panel(
        "Keys split across partitions",
        "Sampled keys seen in two partitions of a topic: producers disagree on the partitioner "
        "(CRC32 vs murmur2) or partitions were added; per-key order is broken. See the runbook.",
        [(increase("keyshared_keys_split_across_partitions_total", "topic", P), "{{topic}}")],
        thresholds=[("green", None), ("red", 1)],
    )
    g.panel(
        "Filtered and skipped",
        "Records no key filter accepts, and records already finished before a restart.",
        [
            (rate("keyshared_records_filtered_total", "topic"), "filtered {{topic}}"),
            (
                rate("keyshared_records_skipped_done_total", "topic"),
                "done before restart {{topic}}",
            ),
        ],
        unit="ops",
    )
    g.row("Commits, rebalances and drains")
    g.panel(
        "Commits by outcome",
        "Offset commits per second; any failed commit means redelivery after a crash grows.",
        [(rate("keyshared_commits_total", "outcome", M), "{{outcome}}")],
        unit="ops",
    )
    g.panel(
        "Commit metadata size and overflows",
        "Bytes of finished-above-cursor offsets sent with commits; overflows mean redone work.",
        [
            (f"max by (member) (keyshared_commit_metadata_size_bytes{{{M}}})", "size {{member}}"),
            (
                increase("keyshared_commit_metadata_overflows_total", "member"),
                "overflows {{member}}",
            ),
        ],
        unit="bytes",
    )
    g.panel(
        "Rebalances",
        "Partition assignment callbacks by kind; 'lost' means the group kicked the member out.",
        [(increase("keyshared_rebalances_total", "kind"), "{{kind}}")],
    )
    g.panel(
        "Drain duration",
        "Time to finish in-flight records of revoked partitions (max and p99 over the interval).",
        [
            (quantile(0.99, "keyshared_drain_duration_seconds", M), "p99"),
            (
                f"max(rate(keyshared_drain_duration_seconds_sum{{{M}}}{RI})"
                f" / rate(keyshared_drain_duration_seconds_count{{{M}}}{RI}))",
                "mean (worst member)",
            ),
        ],
        unit="s",
    )
    g.panel(
        "Drain timeouts",
        "Drains that gave up with records still in flight: duplicates for the next owner.",
        [(increase("keyshared_drain_timeouts_total", "member"), "{{member}}")],
        thresholds=[("green", None), ("red", 1)],
    )
    g.panel(
        "Hot-key share",
        "Share of recent traffic taken by each partition's busiest key; see /hotkeys for which.",
        [
            (
                per_partition("keyshared_partition_hot_key_share"),
                "{{topic}}/{{partition}}",
            )
        ],
        unit="percentunit",
        thresholds=[("green", None), ("orange", 0.3), ("red", 0.6)],
    )
    g.row("Coordinator (ZooKeeper)")
    g.panel(
        "Members by session state",
        "Members per ZooKeeper session state; anything but connected stops new hand-overs.",
        [(f"sum by (state) (keyshared_coordinator_session_state{{{M}}})", "{{state}}")],
        width=6,
    )
    g.panel(
        "Generation and pending drains",
        "Assignment generation applied by each member, and hand-overs waiting for a drain.",
        [
            (f"max by (member) (keyshared_coordinator_generation{{{M}}})", "gen {{member}}"),
            (
                f"sum by (member) (keyshared_coordinator_pending_drains{{{M}}})",
                "pending {{member}}",
            ),
        ],
        width=6,
    )
    g.panel(
        "Owned slots",
        "Slots (of 65536) owned per member: the key_shared balance.",
        [(f"sum by (member) (keyshared_coordinator_owned_slots{{{P}}})", "{{member}}")],
        width=6,
    )
    g.panel(
        "Holds on dispatch",
        "Age of each named hold on a member's dispatch (0: lifted). While one is in place the "
        "member starts no handler; one that only grows is a hold its owner never lifted "
        "(keyshared status --metrics-url names it too).",
        [
            (
                f"max by (member, hold) (keyshared_dispatch_hold_seconds{{{M}}})",
                "{{member}} {{hold}}",
            )
        ],
        unit="s",
        width=6,
    )
    g.panel(
        "Holdings by phase",
        "Leases, slot ranges or the exclusive lock each member has, by phase of their life "
        "cycle. A holding waiting while nobody drains it, or handing back for minutes, is one "
        "no event will end (/readyz and keyshared status name it, with its age).",
        [
            (
                f"sum by (member, phase) (keyshared_holdings{{{M}}})",
                "{{member}} {{phase}}",
            )
        ],
        width=6,
    )
    g.panel(
        "Hand-over wait, session losses, fencing",
        "p99 wait for the previous owner; lost sessions and stale-lease refusals.",
        [
            (quantile(0.99, "keyshared_coordinator_handover_wait_seconds", M), "hand-over p99 (s)"),
            (increase("keyshared_coordinator_session_losses_total", "member"), "lost {{member}}"),
            (increase("keyshared_coordinator_fencing_events_total", "member"), "fenced {{member}}"),
        ],
        width=6,
    )
    return g.panels
