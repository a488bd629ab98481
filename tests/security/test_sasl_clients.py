"""SASL settings given once, in the consumer config, reach every Kafka client (issue 14, item 3).

Against a broker whose only listener requires SASL/PLAIN (``conftest.sasl_broker``): with the
credentials in the consumer's config dict, a consumer with ``poison="park"`` consumes, writes
dead letters (DLQ producer), parks a key (key-state admin, producer and reader), and the
operator commands (``status``, ``verify``, ``release``, with ``-X``) read and release it. Without
them, each kind of client fails with an error that says so, within its bound.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import keyshared
from keyshared.dev.topics import unique_name
from keyshared.kafka.dlq import DeadLetterWriter
from keyshared.kafka.keystate import KeyStateError, KeyStateStore
from keyshared.metrics import ConsumerMetrics
from keyshared.ops.admin import GroupReader, OpsError
from keyshared.runtime.sinks import Failure
from tests.kafka.support.inprocess import Recorder, running
from tests.kafka.support.journal import REPO_ROOT, keyshared_command, wait_for
from tests.security.conftest import SaslBroker

RETRY_ONCE = keyshared.RetryPolicy(max_attempts=1)


def _produce(broker: SaslBroker, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({**broker.config, "enable.idempotence": True})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def _read(broker: SaslBroker, topic: str, expected: int) -> list[Any]:
    reader = Consumer({**broker.config, "group.id": unique_name("r"), "enable.auto.commit": False})
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        messages: list[Any] = []
        deadline = time.monotonic() + 30
        while len(messages) < expected and time.monotonic() < deadline:
            messages += [m for m in reader.consume(100, 0.5) if m.error() is None]
        return messages
    finally:
        reader.close()


def _committed(broker: SaslBroker, group: str, topic: str) -> int:
    consumer = Consumer({**broker.config, "group.id": group})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        consumer.close()


def _cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSHARED_")}
    return subprocess.run([*keyshared_command(), *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def test_credentials_in_the_consumer_config_reach_every_client(sasl_broker: SaslBroker) -> None:
    broker = sasl_broker
    topic, dlq = broker.new_topic(), broker.new_topic()
    group = unique_name("sasl")
    _produce(broker, topic, [(b"a", b"1"), (b"p", b"1"), (b"a", b"2"), (b"p", b"2"),
                             (b"b", b"1")])  # fmt: skip

    def work(record: keyshared.Record) -> None:
        if record.key == b"p" and record.value == b"1":
            raise ValueError("poison")

    recorder = Recorder(work)
    consumer = keyshared.KeySharedConsumer(
        {**broker.config, "group.id": group},
        [topic],
        recorder,
        workers=2,
        poison="park",
        dlq_topic=dlq,
        retry=RETRY_ONCE,
        commit_interval=0.2,
        startup_timeout=20,
    )
    with running(consumer):
        # DLQ producer: the poison record and the parked key's tail, in order.
        letters = _read(broker, dlq, 2)
        assert [(m.key(), m.value()) for m in letters] == [(b"p", b"1"), (b"p", b"2")]
        assert dict(letters[1].headers())["keyshared.reason"] == b"parked"
        wait_for(lambda: _committed(broker, group, topic) == 5, 30, "the commit to the end")
        parked_status = _cli("status", "-b", broker.bootstrap, "-g", group, "-t", topic,
                             "--dlq-topic", dlq, "--json", *broker.properties())  # fmt: skip
        assert parked_status.returncode == 0, parked_status.stderr[-2000:]
        report = json.loads(parked_status.stdout)
        assert [(k["key"], k["state"]) for k in report["key_states"]] == [("p", "parked")]
        held = _cli("verify", "-b", broker.bootstrap, "-g", group, "-t", topic,
                    "--dlq-topic", dlq, *broker.properties())  # fmt: skip
        assert held.returncode == 1, "a parked key is not complete"
        released = _cli("release", "-b", broker.bootstrap, "-g", group, "-t", topic,
                        "-p", "0", "-k", "p", *broker.properties())  # fmt: skip
        assert released.returncode == 0, released.stderr[-2000:]
        # The running member hears the release through its key-state reader: p is processed
        # again instead of going to the DLQ.
        _produce(broker, topic, [(b"p", b"3")])
        wait_for(lambda: any(e.key == b"p" and e.kind == "E" for e in recorder.snapshot()), 30,
                 "the released key's next record")  # fmt: skip
        wait_for(lambda: _committed(broker, group, topic) == 6, 30, "the commit to the end")
    done = _cli("verify", "-b", broker.bootstrap, "-g", group, "-t", topic,
                "--dlq-topic", dlq, *broker.properties())  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # p1 ran once (failed, dead-lettered), p2 never ran (the parked tail), p3 ran after release.
    assert sorted((e.key, e.seq) for e in recorder.snapshot() if e.kind == "S") == [
        (b"a", 1), (b"a", 2), (b"b", 1), (b"p", 1), (b"p", 3)]  # fmt: skip


# -- without credentials: a clear error from each client, within its bound -------------------


def _timed(action: Callable[[], object]) -> tuple[BaseException, float]:
    started = time.monotonic()
    try:
        action()
    except BaseException as exc:
        return exc, time.monotonic() - started
    raise AssertionError("no error without credentials")


@pytest.mark.parametrize(
    ("credentials", "says"),
    [({}, "security.protocol=plaintext"), ("wrong", "Authentication failed")],
    ids=["none", "wrong-password"],
)
def test_consumer_without_valid_credentials_fails_clearly(
    sasl_broker: SaslBroker, credentials: Any, says: str
) -> None:
    extra = (
        {**sasl_broker.credentials, "sasl.password": "not-the-password"}
        if credentials == "wrong"
        else credentials
    )
    config = {"bootstrap.servers": sasl_broker.bootstrap, "group.id": "g", **extra}
    consumer = keyshared.KeySharedConsumer(config, ["t"], print, startup_timeout=4)
    error, elapsed = _timed(consumer.run)
    assert isinstance(error, keyshared.UnreachableError), repr(error)
    assert elapsed < 10, f"took {elapsed:.1f}s with startup_timeout=4"
    assert sasl_broker.bootstrap in str(error) and says in str(error), str(error)


class _Message:
    def __init__(self, topic: str) -> None:
        self._topic = topic

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 0

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v"

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)


def _call_later(delay: float, fn: Callable[[], None]) -> None:
    timer = threading.Timer(delay, fn)
    timer.daemon = True
    timer.start()


def test_dlq_producer_without_credentials_reports_and_never_acks(
    sasl_broker: SaslBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="keyshared.kafka.dlq")
    acked = threading.Event()
    writer = DeadLetterWriter({"bootstrap.servers": sasl_broker.bootstrap}, "g",
                              lambda t: f"{t}.dlq", ConsumerMetrics("g", unique_name("m")),
                              _call_later)  # fmt: skip
    try:
        writer.send(_Message("orders"), Failure(1, ValueError("x"), "exhausted", "", 0.0),
                    still_wanted=lambda: True, on_acked=acked.set)  # fmt: skip
        wait_for(lambda: any("dead letter of orders[0]@0" in r.getMessage()
                             for r in caplog.records), 20, "the failure report")  # fmt: skip
    finally:
        writer.close(1.0)
    assert not acked.is_set(), "a dead letter counted as written without the broker's ack"


def test_key_state_store_without_credentials_fails_within_its_timeout(
    sasl_broker: SaslBroker,
) -> None:
    store = KeyStateStore({"bootstrap.servers": sasl_broker.bootstrap}, "g", lambda *_: None,
                          _call_later)  # fmt: skip
    try:
        error, elapsed = _timed(lambda: store.start(4.0))
    finally:
        store.close(1.0)
    assert isinstance(error, KeyStateError), repr(error)
    assert elapsed < 15, f"took {elapsed:.1f}s with a 4 s timeout"


def test_ops_reader_and_commands_without_credentials_fail_clearly(
    sasl_broker: SaslBroker,
) -> None:
    reader = GroupReader({"bootstrap.servers": sasl_broker.bootstrap}, timeout=3.0)
    try:
        error, elapsed = _timed(reader.topics)
    finally:
        reader.close()
    assert isinstance(error, OpsError) and sasl_broker.bootstrap in str(error), repr(error)
    assert elapsed < 10
    for command in ("status", "verify"):
        started = time.monotonic()
        result = _cli(command, "-b", sasl_broker.bootstrap, "-g", "g", "-t", "t",
                      "--timeout", "3")  # fmt: skip
        assert result.returncode == 2, (command, result.returncode, result.stderr[-1000:])
        assert sasl_broker.bootstrap in result.stderr and "Traceback" not in result.stderr
        assert time.monotonic() - started < 30
