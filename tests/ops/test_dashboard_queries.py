"""Every query of the Grafana dashboard, evaluated by a real Prometheus scraping keyshared.

Two runs, both against Debian's ``prometheus`` on loopback scraping every second:

* ``test_dashboard_queries_on_a_synthetic_exporter`` drives every facade method (coordinator and
  rare events included) and requires *every* panel query to return at least one non-NaN point.
  It proves the PromQL, the label names and the variable plumbing, not the consumer.
* ``test_dashboard_queries_on_a_real_consumer`` runs a real ``KeySharedConsumer`` on a real
  broker under load, with a handler that fails every record of some keys and a
  ``dead_letter`` poison policy so failures, retries and dead letters really happen, and a second
  member joining the group midway so rebalances and drains really happen. Every panel must show
  data, except panels that only a ZooKeeper-coordinated group can fill (their metrics come from
  the coordinator, and this run has none); those are named in ``COORDINATOR_ONLY`` and covered
  by the synthetic run and by the same test in ``key_shared`` mode, where two members coordinated
  through the real ZooKeeper must fill every panel, the coordinator's included. No query is
  padded with ``or vector(0)``: a zero line is only drawn when
  the series exists, which the facade guarantees by creating known label sets at zero (the
  standard Prometheus practice) — never by faking a value in the dashboard.

Both also fail if a panel reads a series that keyshared does not export, if the checked-in JSON
is stale against ``grafana/dashboard.py``, or if a variable's ``label_values`` misses the run's
group or topic.
"""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .dashboard import (
    DEFAULT_DASHBOARD,
    check_dashboard,
    dashboard_queries,
    exported_names,
    metric_names,
)
from .prometheus import BINARY, Prometheus
from .synthetic import SyntheticExporter

COORDINATOR_ONLY = (
    "keyshared_coordinator_",
    "keyshared_dispatch_hold_seconds",
    "keyshared_holdings",
)
ALERTS = Path(__file__).parents[2] / "grafana" / "prometheus" / "keyshared-alerts.yml"

needs_prometheus = pytest.mark.skipif(
    shutil.which(BINARY) is None, reason=f"{BINARY} missing: apt-get install prometheus"
)


def _generator() -> object:
    path = Path(__file__).parents[2] / "grafana" / "dashboard.py"
    spec = importlib.util.spec_from_file_location("keyshared_grafana_dashboard", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_dashboard_matches_its_generator() -> None:
    render = _generator().render  # type: ignore[attr-defined]
    assert DEFAULT_DASHBOARD.read_text() == render(), "run: python grafana/dashboard.py"


def test_alert_rules_read_only_exported_series() -> None:
    names = metric_names(ALERTS.read_text())
    assert len(names) > 10
    assert names <= exported_names(), names - exported_names()


def test_every_panel_has_a_query_on_keyshared_metrics() -> None:
    queries = dashboard_queries()
    assert len(queries) > 30
    for q in queries:
        assert metric_names(q.expr), f"{q.panel} [{q.ref_id}] reads no keyshared_ series"


@pytest.mark.integration  # runs Prometheus
@needs_prometheus
def test_dashboard_queries_on_a_synthetic_exporter(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad_exprs = [
        'sum(rate(keyshared_records_received_total{group=~"$group"}[$__rate_interval])',
        'sum(keyshared_partition_lag{group=~"$group",topic="no-such-topic"})',
        'sum(keyshared_records_recieved_total{group=~"$group"})',
    ]
    bad.write_text(
        json.dumps(
            {
                "panels": [
                    {"title": f"bad {i}", "targets": [{"refId": "A", "expr": e}]}
                    for i, e in enumerate(bad_exprs)
                ]
            }
        )
    )
    exporter = SyntheticExporter(group="synthetic-group", topic="synthetic-topic")
    exporter.start()
    try:
        with Prometheus([exporter.target], rule_files=[ALERTS]) as prom:
            start = time.time()
            prom.wait_for_scrapes(5)
            # Counters must have moved between scrapes, or rate() panels are flat by accident.
            prom.wait_until(
                'sum(increase(keyshared_records_received_total{group="synthetic-group"}[5s]))',
                lambda v: v > 0,
                what="received records increasing",
            )
            prom.wait_until(
                'sum(keyshared_drain_duration_seconds_count{group="synthetic-group"})',
                lambda v: v >= 2,
                what="two drains recorded",
            )
            report = check_dashboard(
                prom, DEFAULT_DASHBOARD, "synthetic-group", "synthetic-topic", start
            )
            # Every alert rule evaluates without error (an error shows as health "err").
            deadline = time.monotonic() + 60
            while any(r["health"] == "unknown" for r in prom.rules()):
                assert time.monotonic() < deadline, "alert rules never evaluated"
                time.sleep(0.5)
            rules = prom.rules()
            # The checker itself must catch a syntax error, an empty panel and a typo'd name.
            caught = check_dashboard(prom, bad, "synthetic-group", "synthetic-topic", start)
    finally:
        exporter.close()
    assert report.ok, "\n" + report.table()
    assert [bool(r.error) for r in caught.failures] == [True, False, False]
    assert set(caught.unknown_metrics) == {"bad 2"}
    assert len(rules) >= 15
    broken = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert not broken, broken


class _Load:
    """Produces keyed records until stopped: ordinary keys, poison keys, and filtered keys."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)
        self.produced = 0

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(0.01):
            for _ in range(5):  # about 500 records/s: enough to move every rate on a noisy box
                i = n % 100
                key = f"poison-{i % 3}" if i == 0 else (f"other-{i}" if i == 1 else f"k{i % 40}")
                self._producer.produce(self._topic, key=key.encode(), value=str(n).encode())
                n += 1
            self._producer.poll(0)
        self._producer.flush(30)
        self.produced = n

    def __enter__(self) -> _Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _handle(record: Any) -> None:
    time.sleep(random.uniform(0.001, 0.005))
    if bytes(record.raw_key or b"").startswith(b"poison"):
        raise ValueError(f"poison record at offset {record.offset}")


def _start_consumer(
    bootstrap: str, group: str, topic: str, dlq: str, zookeeper: str | None = None
) -> tuple[Any, Any]:
    from coordinator import ZooKeeperCoordinator
    from keyshared import KeySharedConsumer, RetryPolicy

    coordinated: dict[str, Any] = {}
    if zookeeper is not None:
        coordinated = {
            "mode": "key_shared",
            "coordinator": ZooKeeperCoordinator(zookeeper, namespace="/keyshared-tests"),
        }
    consumer = KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"},
        [topic],
        _handle,
        workers=4,
        poison="dead_letter",
        dlq_topic=dlq,
        retry=RetryPolicy(max_attempts=2, initial_backoff=0.05, max_backoff=0.1),
        key_filters=["k*", "poison-*"],
        metrics_port=0,
        **coordinated,
    )
    thread = threading.Thread(target=consumer.run, name=f"consumer-{group}", daemon=True)
    thread.start()
    assert consumer.wait_started(60), "consumer did not start"
    deadline = time.monotonic() + 30
    while consumer.metrics_url is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert consumer.metrics_url is not None
    return consumer, thread


def _target(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


@pytest.mark.integration
@needs_prometheus
@pytest.mark.parametrize("mode", ["partition", "key_shared"])
def test_dashboard_queries_on_a_real_consumer(
    kafka_bootstrap: str,
    zookeeper_hosts: str,
    new_topic: Callable[..., str],
    new_group: Callable[[str], str],
    mode: str,
) -> None:
    """In partition mode every panel but the coordinator's must show data; in key_shared mode
    (two members coordinated through the real ZooKeeper) every panel must, the coordinator's
    included."""
    topic, dlq = new_topic(partitions=4, prefix="dash"), new_topic(partitions=1, prefix="dash-dlq")
    group = new_group("dash")
    zookeeper = zookeeper_hosts if mode == "key_shared" else None
    optional = COORDINATOR_ONLY if zookeeper is None else ()
    consumers: list[tuple[Any, Any]] = []
    with _Load(kafka_bootstrap, topic), Prometheus() as prom:
        try:
            start = time.time()
            consumers.append(_start_consumer(kafka_bootstrap, group, topic, dlq, zookeeper))
            prom.add_target(_target(consumers[0][0].metrics_url))
            prom.wait_for_scrapes(3)
            sel = f'group="{group}"'
            prom.wait_until(
                f"sum(increase(keyshared_records_processed_total{{{sel}}}[5s]))",
                lambda v: v > 0,
                what="processed records increasing",
            )
            prom.wait_until(
                f"sum(keyshared_records_dead_lettered_total{{{sel}}})",
                lambda v: v > 0,
                what="a dead letter",
            )
            # A second member joining makes the first revoke and drain partitions.
            consumers.append(_start_consumer(kafka_bootstrap, group, topic, dlq, zookeeper))
            prom.add_target(_target(consumers[1][0].metrics_url))
            prom.wait_until(
                f"sum(keyshared_drain_duration_seconds_count{{{sel}}})",
                lambda v: v > 0,
                what="a drain after the second member joined",
            )
            prom.wait_for_scrapes(3)
            prom.wait_until(
                f"count(keyshared_partition_committed_offset{{{sel}}})",
                lambda v: v >= 4,
                what="every partition committed",
            )
            hot_url = consumers[0][0].metrics_url.removesuffix("/metrics") + "/hotkeys"
            hot = json.loads(urllib.request.urlopen(hot_url, timeout=10).read())
            if zookeeper is not None:
                prom.wait_until(
                    f"sum(keyshared_coordinator_handover_wait_seconds_count{{{sel}}})",
                    lambda v: v >= 2,
                    what="leases granted to both members",
                )
                prom.wait_for_scrapes(3)
            report = check_dashboard(
                prom, DEFAULT_DASHBOARD, group, topic, start, optional=optional
            )
        finally:
            for consumer, _ in consumers:
                consumer.stop()
            for _, thread in consumers:
                thread.join(60)
    assert report.ok, "\n" + report.table()
    # The consumer's own hot-key view is served on the same port, keys as text.
    assert any(p["busiest"] for p in hot["partitions"]), hot
