"""``/healthz`` and ``/readyz`` of a real consumer on a real broker.

- a stalled ``consume`` (the one way the poll loop can wedge: handlers run on workers) fails
  liveness after ``wedged_after`` and readiness at once (never joined), both saying why, and
  both recover when it returns;
- a record stuck past ``stuck_after`` fails readiness naming the partition and offset, and
  readiness comes back once it finishes;
- a member the group gives no partition is joined and ready (idle).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import keyshared
from tests.helpers import produce, wait_until
from tests.kafka.support.inprocess import Recorder, running
from tests.kafka.support.probes import probe


class _StallableConsumer:
    """The real Kafka consumer, except that ``consume`` blocks while ``stalled`` is set."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.stalled = threading.Event()
        self.unstall = threading.Event()  # not `resume`: that is the consumer method it wraps
        self.entered_stall = threading.Event()

    def consume(self, *args: Any, **kwargs: Any) -> Any:
        if self.stalled.is_set():
            self.entered_stall.set()
            self.unstall.wait(120)
        return self._inner.consume(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _consumer(bootstrap: str, group: str, topic: str, handler: Any, **options: Any) -> Any:
    return keyshared.KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group},
        [topic],
        handler,
        workers=2,
        commit_interval=0.2,
        metrics_port=0,
        **options,
    )


def test_a_stalled_poll_loop_fails_liveness_and_recovers(
    kafka_bootstrap: str, new_topic: Any, new_group: Any
) -> None:
    topic = new_topic(partitions=1)
    consumer = _consumer(
        kafka_bootstrap, new_group(), topic, Recorder(), drain_timeout=1.0, wedged_after=2.0
    )
    stallable = _StallableConsumer(consumer._consumer)
    consumer._consumer = stallable
    stallable.stalled.set()  # from the first consume on: the member cannot even join
    try:
        with running(consumer):
            assert stallable.entered_stall.wait(30)
            status, body = probe(consumer, "/readyz")
            assert status == 503 and body["role"] == "joining", body
            assert "not joined yet" in body["reasons"][0]
            wait_until(lambda: probe(consumer, "/healthz")[0] == 503, "liveness to fail")
            status, body = probe(consumer, "/healthz")
            assert body["status"] == "fail" and body["poll_loop_idle_seconds"] > 2.0
            assert "poll loop has not iterated" in body["reasons"][0], body
            assert "wedged" in " ".join(probe(consumer, "/readyz")[1]["reasons"])

            stallable.stalled.clear()
            stallable.unstall.set()
            wait_until(lambda: probe(consumer, "/readyz")[0] == 200, "readiness after the stall")
            status, body = probe(consumer, "/healthz")
            assert status == 200 and body["reasons"] == [], body
            wait_until(lambda: probe(consumer, "/readyz")[1]["partitions"] == 1, "the partition")
    finally:
        stallable.unstall.set()


def test_a_stuck_record_fails_readiness_until_it_finishes(
    kafka_bootstrap: str, new_topic: Any, new_group: Any
) -> None:
    topic = new_topic(partitions=1)
    release = threading.Event()

    def work(record: keyshared.Record) -> None:
        if record.key == b"stuck":
            release.wait(120)

    recorder = Recorder(work)
    produce(kafka_bootstrap, topic, [(0, b"stuck", b"0"), (0, b"other", b"1")])
    consumer = _consumer(kafka_bootstrap, new_group(), topic, recorder, stuck_after=1.0)
    try:
        with running(consumer):
            wait_until(lambda: recorder.finished() >= 1, "the other key's record")
            wait_until(lambda: probe(consumer, "/readyz")[0] == 503, "readiness to fail")
            _, body = probe(consumer, "/readyz")
            assert body["role"] == "member" and body["partitions"] == 1
            assert body["stuck"][0]["topic"] == topic and body["stuck"][0]["offset"] == 0
            assert f"{topic}[0]@0 has held the committed offset back" in body["reasons"][0]
            assert probe(consumer, "/healthz")[0] == 200  # stuck is not wedged: no restart

            release.set()
            wait_until(lambda: probe(consumer, "/readyz")[0] == 200, "readiness once it finished")
    finally:
        release.set()


def test_a_member_without_partitions_is_joined_and_ready(
    kafka_bootstrap: str, new_topic: Any, new_group: Any
) -> None:
    topic, group = new_topic(partitions=1), new_group()
    first = _consumer(kafka_bootstrap, group, topic, Recorder())
    second = _consumer(kafka_bootstrap, group, topic, Recorder())
    with running(first):
        wait_until(lambda: probe(first, "/readyz")[1]["partitions"] == 1, "the first to join")
        with running(second):
            wait_until(lambda: probe(second, "/readyz")[0] == 200, "the idle member to be ready")
            _, body = probe(second, "/readyz")
            assert body["role"] == "member" and body["partitions"] == 0, body
            assert probe(first, "/readyz")[1]["partitions"] == 1


def test_probes_without_a_source_are_404() -> None:
    import json
    import urllib.error
    import urllib.request

    from keyshared.metrics import start_metrics_server

    with start_metrics_server(0) as server:
        base = server.url.rsplit("/", 1)[0]
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(base + "/readyz", timeout=5)
        assert raised.value.code == 404
        assert json.loads(raised.value.read()) == {"error": "no health source"}
