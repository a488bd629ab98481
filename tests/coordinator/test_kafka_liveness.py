"""The Kafka probe of a ``key_shared`` member (:mod:`coordinator.modes.kafka_liveness`), without
servers: silence counts only from probes that were sent and went unanswered."""

from __future__ import annotations

import time

import pytest

from coordinator.modes import kafka_liveness
from coordinator.modes.kafka_liveness import KafkaLiveness
from tests.coordinator.conftest import closed_port
from tests.helpers import wait_until


def test_the_bound_is_the_consumers_session_timeout() -> None:
    assert KafkaLiveness({"bootstrap.servers": "x:1"}, ["t"]).bound == 45.0  # librdkafka's
    config = {"bootstrap.servers": "x:1", "session.timeout.ms": "6000"}
    assert KafkaLiveness(config, ["t"]).bound == 6.0


def test_a_member_frozen_with_its_probe_is_not_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    # A SIGSTOP or a GC pause freezes the probe as well: after it, no probe went unanswered,
    # so nothing is known against Kafka. Counted from the last answer instead, a member
    # resumed after a 7 s stall left the plan at once (found by the chaos run, issue 27).
    liveness = KafkaLiveness({"bootstrap.servers": f"127.0.0.1:{closed_port()}"}, ["t"])
    liveness.start()
    liveness.stop()  # frozen: no probe runs any more
    later = time.monotonic() + 60
    monkeypatch.setattr(kafka_liveness.time, "monotonic", lambda: later)
    assert liveness.silent_for() == 0.0 and liveness.answering()


def test_unanswered_probes_make_silence_from_the_first_of_them() -> None:
    liveness = KafkaLiveness(
        {"bootstrap.servers": f"127.0.0.1:{closed_port()}"}, ["t"], probe_every=0.05
    )
    liveness.start()
    try:
        wait_until(lambda: liveness.silent_for() > 0.5, "silence to grow", timeout=15)
        assert not liveness.answering()
    finally:
        liveness.stop()
