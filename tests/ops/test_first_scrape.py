"""A fresh, healthy member exports every series the dashboard and the alert rules read.

Why: a panel or an alert whose series appears only after a first failure (a dead letter, a DLQ
write failure, a key seen in two partitions) shows "no data" on a healthy consumer, which reads
as broken, and ``increase()`` misses the first event because the series starts at 1. So the
member that processed some records, failed none and dead-lettered nothing must already export
all of them (at zero), its coordinator's aside when it runs without one.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

import keyshared
from keyshared.metrics.families import PARTITION_FAMILIES
from tests.helpers import produce, wait_until
from tests.kafka.support.inprocess import Recorder, running

from .dashboard import dashboard_queries, metric_names

ALERTS = Path(__file__).parents[2] / "grafana" / "prometheus" / "keyshared-alerts.yml"
# Coordinator series, the holds on dispatch, which only a coordinated member takes (its
# session gate declares them at 0), and its holdings (leases, ranges, the exclusive lock).
COORDINATOR_ONLY = (
    "keyshared_coordinator_",
    "keyshared_dispatch_hold_seconds",
    "keyshared_holdings",
)
# Per-partition families have series only once a partition is assigned.
PER_PARTITION = tuple(m.name for family in PARTITION_FAMILIES for m in family.describe())


def _series(url: str, member: str) -> set[str]:
    """The sample names this member exports in one scrape."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        sample.name
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("member") == member
    }


def test_a_fresh_member_exports_every_series_of_the_dashboard_and_alerts(
    kafka_bootstrap: str, new_topic: Callable[..., str], new_group: Callable[[str], str]
) -> None:
    topic = new_topic(partitions=2, prefix="fresh")
    produce(kafka_bootstrap, topic, [(i % 2, b"k%d" % i, b"1") for i in range(20)])
    recorder = Recorder()
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": new_group("fresh"), "client.id": "m1"},
        [topic],
        recorder,
        workers=2,
        poison="dead_letter",
        commit_interval=0.2,
        metrics_port=0,
    )
    wanted = set(metric_names(ALERTS.read_text()))
    for query in dashboard_queries():
        wanted |= metric_names(query.expr)
    wanted = {name for name in wanted if not name.startswith(COORDINATOR_ONLY)}
    assert len(wanted) > 20
    with running(consumer):
        url: Any = consumer.metrics_url
        # The very first scrape, before any assignment: every member-level series is there.
        member_level = {n for n in wanted if not n.startswith(PER_PARTITION)}
        first = _series(url, "m1")
        assert member_level <= first, f"missing at the first scrape: {member_level - first}"
        wait_until(lambda: recorder.finished() == 20, "every record processed")
        # Committed offset and lag are absent until Kafka told them (never a false 0): wait
        # for the first commit to be known, then one scrape must have everything.
        wait_until(
            lambda: (
                "keyshared_partition_lag" in _series(url, "m1")
                and "keyshared_partition_committed_offset" in _series(url, "m1")
            ),
            "the first commit and high watermark",
        )
        exported = _series(url, "m1")
    missing = sorted(wanted - exported)
    assert not missing, f"a healthy member that dead-lettered nothing lacks {missing}"
