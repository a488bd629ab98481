"""Unit tests of the metrics facades and the endpoint: no broker, real HTTP on loopback."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from keyshared.core.holding import Phase
from keyshared.metrics import (
    ConsumerMetrics,
    CoordinatorMetrics,
    key_text,
    start_metrics_server,
)
from keyshared.metrics.families import (
    CONSUMER_FAMILIES,
    COORDINATOR_FAMILIES,
    PARTITION_FAMILIES,
)

ALL_FAMILIES = (*PARTITION_FAMILIES, *CONSUMER_FAMILIES, *COORDINATOR_FAMILIES)


def _member() -> str:
    # The families are process-wide; a fresh member name isolates each test's series.
    return f"m-{uuid.uuid4().hex[:8]}"


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_partition_counters_and_histograms_update_their_series() -> None:
    member = _member()
    m = ConsumerMetrics("g", member)
    p = m.partition("t", 3)
    labels = {"group": "g", "member": member, "topic": "t", "partition": "3"}
    assert value("keyshared_records_failed_total", **labels) == 0.0  # created at zero
    p.received.inc()
    p.received.inc()
    p.processed.inc()
    for attr in (
        "failed",
        "retried",
        "dropped",
        "dead_lettered",
        "parked",
        "filtered",
        "skipped_done",
    ):
        getattr(p, attr).inc()
    p.handler_seconds.observe(0.003)
    p.end_to_end_seconds.observe(2.0)
    assert value("keyshared_records_received_total", **labels) == 2.0
    assert value("keyshared_records_processed_total", **labels) == 1.0
    assert value("keyshared_records_skipped_done_total", **labels) == 1.0
    assert value("keyshared_records_dead_lettered_total", **labels) == 1.0
    assert value("keyshared_handler_duration_seconds_count", **labels) == 1.0
    assert value("keyshared_handler_duration_seconds_bucket", le="0.0025", **labels) == 0.0
    assert value("keyshared_handler_duration_seconds_bucket", le="0.005", **labels) == 1.0
    assert value("keyshared_end_to_end_latency_seconds_sum", **labels) == 2.0
    assert m.partition("t", 3) is p


def test_update_sets_gauges_and_derives_lag() -> None:
    member = _member()
    p = ConsumerMetrics("g", member).partition("t", 0)
    labels = {"group": "g", "member": member, "topic": "t", "partition": "0"}
    gauges = dict(in_flight=2, waiting=5, busy_keys=2, blocked_keys=1, paused=True)
    p.update(
        **gauges,
        safe_cursor=40,
        committed=None,
        high_watermark=None,
        oldest_incomplete_age=1.5,
        hot_key_share=0.25,
    )
    assert value("keyshared_partition_waiting", **labels) == 5.0
    assert value("keyshared_partition_paused", **labels) == 1.0
    assert value("keyshared_partition_oldest_incomplete_age_seconds", **labels) == 1.5
    assert value("keyshared_partition_hot_key_share", **labels) == 0.25
    # Unknown offsets are absent, not a misleading zero.
    assert value("keyshared_partition_committed_offset", **labels) is None
    assert value("keyshared_partition_lag", **labels) is None

    p.update(
        **gauges,
        safe_cursor=40,
        committed=None,
        high_watermark=100,
        oldest_incomplete_age=0.0,
        hot_key_share=0.0,
    )
    assert value("keyshared_partition_lag", **labels) == 60.0  # from the safe cursor

    p.update(
        **{**gauges, "paused": False},
        safe_cursor=90,
        committed=80,
        high_watermark=100,
        oldest_incomplete_age=0.0,
        hot_key_share=0.0,
    )
    assert value("keyshared_partition_lag", **labels) == 20.0  # from the committed offset
    assert value("keyshared_partition_committed_offset", **labels) == 80.0
    assert value("keyshared_partition_high_watermark_offset", **labels) == 100.0
    assert value("keyshared_partition_safe_cursor_offset", **labels) == 90.0
    assert value("keyshared_partition_paused", **labels) == 0.0


def test_forget_partition_removes_only_that_partition() -> None:
    member = _member()
    m = ConsumerMetrics("g", member)
    gone, kept = m.partition("t", 0), m.partition("t", 1)
    for p in (gone, kept):
        p.received.inc()
        p.update(
            in_flight=0,
            waiting=0,
            busy_keys=0,
            blocked_keys=0,
            paused=False,
            safe_cursor=1,
            committed=1,
            high_watermark=2,
            oldest_incomplete_age=0.0,
            hot_key_share=0.0,
        )
    m.forget_partition("t", 0)
    base = {"group": "g", "member": member, "topic": "t"}
    for name in (
        "keyshared_records_received_total",
        "keyshared_partition_lag",
        "keyshared_partition_committed_offset",
        "keyshared_handler_duration_seconds_count",
    ):
        assert value(name, partition="0", **base) is None, name
    assert value("keyshared_records_received_total", partition="1", **base) == 1.0
    assert value("keyshared_partition_lag", partition="1", **base) == 1.0
    # Re-assignment starts a fresh child.
    assert m.partition("t", 0) is not gone
    assert value("keyshared_records_received_total", partition="0", **base) == 0.0


def test_consumer_level_methods() -> None:
    member = _member()
    m = ConsumerMetrics("g", member)
    labels = {"group": "g", "member": member}
    assert value("keyshared_rebalances_total", kind="lost", **labels) == 0.0
    assert value("keyshared_commits_total", outcome="failed", **labels) == 0.0
    m.rebalance("assigned")
    m.rebalance("revoked")
    m.commit(True)
    m.commit(True)
    m.commit(False)
    m.metadata(512, overflow=False)
    m.metadata(4096, overflow=True)
    m.drain(0.2, timed_out=False)
    m.drain(30.0, timed_out=True)
    m.dlq_written("t.dlq")
    m.dlq_write_failed("t.dlq")
    m.dlq_write_failed("t.dlq")
    m.worker_queue_depth(3, 7)
    m.set_paused_partitions(2)
    m.set_workers(8)
    assert value("keyshared_rebalances_total", kind="assigned", **labels) == 1.0
    assert value("keyshared_commits_total", outcome="ok", **labels) == 2.0
    assert value("keyshared_commits_total", outcome="failed", **labels) == 1.0
    assert value("keyshared_commit_metadata_size_bytes", **labels) == 4096.0
    assert value("keyshared_commit_metadata_overflows_total", **labels) == 1.0
    assert value("keyshared_drain_duration_seconds_count", **labels) == 2.0
    assert value("keyshared_drain_timeouts_total", **labels) == 1.0
    assert value("keyshared_dlq_writes_total", dlq_topic="t.dlq", **labels) == 1.0
    assert value("keyshared_dlq_write_failures_total", dlq_topic="t.dlq", **labels) == 2.0
    assert value("keyshared_worker_queue_depth", worker="3", **labels) == 7.0
    assert value("keyshared_paused_partitions", **labels) == 2.0
    assert value("keyshared_workers", **labels) == 8.0
    with pytest.raises(ValueError, match="rebalance kind"):
        m.rebalance("exploded")


def test_dlq_failure_series_exists_once_a_dlq_is_used() -> None:
    member = _member()
    ConsumerMetrics("g", member).dlq_written("x.dlq")
    labels = {"group": "g", "member": member, "dlq_topic": "x.dlq"}
    assert value("keyshared_dlq_write_failures_total", **labels) == 0.0


def test_shrinking_workers_drops_their_queue_depth() -> None:
    member = _member()
    m = ConsumerMetrics("g", member)
    m.worker_queue_depth(0, 1)
    m.worker_queue_depth(5, 1)
    m.set_workers(4)
    labels = {"group": "g", "member": member}
    assert value("keyshared_worker_queue_depth", worker="0", **labels) == 1.0
    assert value("keyshared_worker_queue_depth", worker="5", **labels) is None


def test_two_members_in_one_process_coexist_and_close_separately() -> None:
    a, b = _member(), _member()
    ma, mb = ConsumerMetrics("g", a), ConsumerMetrics("g", b)
    ma.partition("t", 0).received.inc()
    mb.partition("t", 0).received.inc(3)
    ma.close()
    labels = {"group": "g", "topic": "t", "partition": "0"}
    assert value("keyshared_records_received_total", member=a, **labels) is None
    assert value("keyshared_rebalances_total", member=a, group="g", kind="assigned") is None
    assert value("keyshared_records_received_total", member=b, **labels) == 3.0


def test_coordinator_facade() -> None:
    member = _member()
    c = CoordinatorMetrics("g", member)
    labels = {"group": "g", "member": member}
    c.session("connected")
    c.generation(4)
    c.owned("t", ranges=2, slots=1000)
    c.pending_drains(1)
    c.handover_waited(0.5)
    c.fenced()
    assert value("keyshared_coordinator_session_state", state="connected", **labels) == 1.0
    c.session("lost")
    assert value("keyshared_coordinator_session_state", state="connected", **labels) == 0.0
    assert value("keyshared_coordinator_session_state", state="lost", **labels) == 1.0
    assert value("keyshared_coordinator_session_losses_total", **labels) == 1.0
    assert value("keyshared_coordinator_generation", **labels) == 4.0
    assert value("keyshared_coordinator_owned_slots", topic="t", **labels) == 1000.0
    assert value("keyshared_coordinator_pending_drains", **labels) == 1.0
    assert value("keyshared_coordinator_handover_wait_seconds_count", **labels) == 1.0
    assert value("keyshared_coordinator_fencing_events_total", **labels) == 1.0
    with pytest.raises(ValueError, match="session state"):
        c.session("confused")
    c.holdings("key_shared", {Phase.ACTIVE: 2, Phase.WAITING: 1})
    assert value("keyshared_holdings", mode="key_shared", phase="active", **labels) == 2.0
    assert value("keyshared_holdings", mode="key_shared", phase="draining", **labels) == 0.0
    c.holdings("key_shared", {Phase.DRAINING: 2})  # a phase left out reads 0 again
    assert value("keyshared_holdings", mode="key_shared", phase="active", **labels) == 0.0
    assert value("keyshared_holdings", mode="key_shared", phase="draining", **labels) == 2.0
    c.close()
    assert value("keyshared_coordinator_generation", **labels) is None
    assert value("keyshared_holdings", mode="key_shared", phase="draining", **labels) is None


def test_every_family_is_in_the_metric_table_of_operations_md() -> None:
    """An operator looks a series up in docs/operations.md; one missing there is one nobody
    knows how to read."""
    text = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    missing = []
    for family in ALL_FAMILIES:
        exposed = {m.name for m in family.describe()}  # a counter's is without _total
        name = family._name + ("_total" if family._type == "counter" else "")
        if f"| `{name}" not in text and not any(f"| `{n}" in text for n in exposed):
            missing.append(name)
    assert not missing, f"not in docs/operations.md's metric table: {missing}"


def test_names_follow_prometheus_conventions() -> None:
    for family in ALL_FAMILIES:
        name = family._name
        assert name.startswith("keyshared_"), name
        assert "key" not in family._labelnames, name  # never a message key as a label
        assert not name.endswith(("_ms", "_milliseconds", "_minutes", "_kb")), name
        if family._type == "histogram":
            assert name.endswith("_seconds"), name  # every histogram here measures time
        if "seconds" in name or "duration" in name or "latency" in name or "age" in name:
            assert name.endswith("_seconds"), name
    # In the exposition, counters carry _total and nothing of ours lacks the prefix.
    member = _member()
    m = ConsumerMetrics("g", member)
    m.partition("t", 0)
    m.dlq_written("d")
    m.worker_queue_depth(0, 0)
    CoordinatorMetrics("g", member).owned("t", ranges=1, slots=1)
    with start_metrics_server(0) as server:
        text = urllib.request.urlopen(server.url, timeout=10).read().decode()
    ours = {f.name for f in ALL_FAMILIES for f in f.collect()}
    parsed = [f for f in text_string_to_metric_families(text) if f.name in ours]
    assert {f.name for f in parsed} == ours
    for family in parsed:
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples), family.name


def test_server_serves_metrics_and_hotkeys() -> None:
    member = _member()
    ConsumerMetrics("g", member).partition("t", 0).processed.inc(5)
    view: dict[str, object] = {
        "t/0": {"busiest": [{"key": b"payment-1", "count": 9}, {"key": b"\xff\x00", "count": 2}]}
    }
    with start_metrics_server(0, hotkeys=lambda: view) as server:
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        body = urllib.request.urlopen(server.url, timeout=10).read().decode()
        assert f'keyshared_records_processed_total{{group="g",member="{member}"' in body
        base = server.url.removesuffix("/metrics")
        hot = json.loads(urllib.request.urlopen(base + "/hotkeys", timeout=10).read())
        assert hot == {
            "t/0": {"busiest": [{"key": "payment-1", "count": 9}, {"key": "0xff00", "count": 2}]}
        }
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "/nothing", timeout=10)
        assert missing.value.code == 404
    server.close()  # idempotent


def test_hotkeys_without_source_or_with_a_failing_one() -> None:
    with start_metrics_server(0) as server:
        base = server.url.removesuffix("/metrics")
        with pytest.raises(urllib.error.HTTPError) as none:
            urllib.request.urlopen(base + "/hotkeys", timeout=10)
        assert none.value.code == 404

    def broken() -> dict[str, object]:
        raise RuntimeError("window lock timeout")

    with start_metrics_server(0, hotkeys=broken) as server:
        base = server.url.removesuffix("/metrics")
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(base + "/hotkeys", timeout=10)
        assert failed.value.code == 500
        # The metrics path keeps working.
        assert urllib.request.urlopen(server.url, timeout=10).status == 200


def test_key_text() -> None:
    assert key_text(None) is None
    assert key_text("é".encode()) == "é"
    assert key_text(b"\x80") == "0x80"


def test_a_hold_reads_its_age_while_in_place_and_zero_once_lifted() -> None:
    member = _member()
    m = ConsumerMetrics("g", member)
    labels = {"group": "g", "member": member, "hold": "zookeeper-liveness"}
    m.set_holds({"zookeeper-liveness": 4.5})
    assert value("keyshared_dispatch_hold_seconds", **labels) == 4.5
    m.set_holds({})
    assert value("keyshared_dispatch_hold_seconds", **labels) == 0.0
    m.close()
    assert value("keyshared_dispatch_hold_seconds", **labels) is None
