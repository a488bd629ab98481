"""Generate ``grafana/dashboards/keyshared.json`` — run ``python grafana/dashboard.py``.

Why code rather than hand-kept JSON: every query repeats the same label filters and the same
``rate(...[$__rate_interval])`` shape, and a 30-panel JSON file hides a typo in one of them. Here
the filters are written once and panels are a line or three each. Why no dashboards-as-code
library (grafanalib, grafana-foundation-sdk): the dashboard is plain JSON anyway, and a stdlib
script keeps it regenerable without a dependency. The JSON is checked in, so Grafana users never
run this; ``tests/ops/test_dashboard_queries.py`` fails if the file and this script disagree.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["OUTPUT", "build", "main"]

OUTPUT = Path(__file__).with_name("dashboards") / "keyshared.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
# Label filters: per-partition series carry topic; member-level series only group.
P = 'group=~"$group",topic=~"$topic"'
M = 'group=~"$group"'
RI = "[$__rate_interval]"

Json = dict[str, Any]
Target = tuple[str, str]  # (expr, legend)


def per_partition(metric: str, agg: str = "max") -> str:
    return f"{agg} by (topic, partition) ({metric}{{{P}}})"


def rate(metric: str, by: str, sel: str = P) -> str:
    return f"sum by ({by}) (rate({metric}{{{sel}}}{RI}))"


def increase(metric: str, by: str, sel: str = M) -> str:
    return f"sum by ({by}) (increase({metric}{{{sel}}}{RI}))"


def quantile(q: float, metric: str, sel: str = P, by: str = "") -> str:
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{sel}}}{RI})))"


class Layout:
    """Places panels left to right in a 24-column grid, starting a new line when full."""

    def __init__(self) -> None:
        self.panels: list[Json] = []
        self.x = 0
        self.y = 0
        self.height = 0

    def row(self, title: str) -> None:
        self.y += self.height
        self.x, self.height = 0, 0
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "id": len(self.panels) + 1,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                "panels": [],
            }
        )
        self.y += 1

    def panel(
        self,
        title: str,
        description: str,
        targets: list[Target],
        *,
        unit: str = "short",
        width: int = 8,
        kind: str = "timeseries",
        thresholds: list[tuple[str, float | None]] | None = None,
    ) -> None:
        if self.x + width > 24:
            self.y += self.height
            self.x, self.height = 0, 0
        steps = thresholds or [("green", None)]
        self.panels.append(
            {
                "type": kind,
                "title": title,
                "description": description,
                "id": len(self.panels) + 1,
                "datasource": DS,
                "gridPos": {"h": 8, "w": width, "x": self.x, "y": self.y},
                "fieldConfig": {
                    "defaults": {
                        "unit": unit,
                        "thresholds": {
                            "mode": "absolute",
                            "steps": [{"color": c, "value": v} for c, v in steps],
                        },
                    },
                    "overrides": [],
                },
                "options": {
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"},
                },
                "targets": [
                    {"refId": chr(ord("A") + i), "datasource": DS, "expr": e, "legendFormat": lg}
                    for i, (e, lg) in enumerate(targets)
                ],
            }
        )
        self.x += width
        self.height = max(self.height, 8)


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


def variable(name: str, query: str) -> Json:
    return {
        "name": name,
        "label": name,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def build() -> Json:
    """The whole dashboard as a JSON-able dict."""
    return {
        "uid": "keyshared",
        "title": "keyshared",
        "description": "Per-key parallel Kafka consumers: flow, backlog, failures, coordination.",
        "tags": ["keyshared", "kafka"],
        "timezone": "browser",
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {"text": "Prometheus", "value": "prometheus"},
                },
                variable("group", "label_values(keyshared_records_received_total, group)"),
                variable(
                    "topic",
                    'label_values(keyshared_records_received_total{group=~"$group"}, topic)',
                ),
            ]
        },
        "panels": panels(),
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    """Write the dashboard, or with ``--check`` exit 1 if the checked-in file is stale."""
    text = render()
    if "--check" in argv:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is stale: run python grafana/dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
