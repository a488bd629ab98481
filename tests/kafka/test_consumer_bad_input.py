"""Bad input gets a clear error and loses nothing (issue 4, SPEC "Guarantees").

Invalid configuration fails at construction naming the option; a missing topic or an
unreachable broker fails clearly within a bound; odd keys (binary, empty, null, 1 MiB) keep
their per-key order; a handler raising a ``BaseException`` takes the poison path and its worker
lives on.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

import keyshared
from keyshared.dev.testing import unique_name
from tests.kafka.support.inprocess import Recorder, running
from tests.kafka.support.journal import (
    check,
    produce,
    sequenced,
    wait_committed_to_end,
    wait_for,
)

BOOTSTRAP_PLACEHOLDER = "127.0.0.1:9"  # construction never connects


def _config(**extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": BOOTSTRAP_PLACEHOLDER, "group.id": "g", **extra}


# -- invalid configuration: at construction, naming the option -------------------------------


@pytest.mark.parametrize(
    ("config", "options", "option"),
    [
        (_config(**{"enable.auto.commit": True}), {}, "enable.auto.commit"),
        (_config(**{"enable.auto.commit": "true"}), {}, "enable.auto.commit"),
        (_config(**{"enable.auto.offset.store": "true"}), {}, "enable.auto.offset.store"),
        ({"bootstrap.servers": BOOTSTRAP_PLACEHOLDER}, {}, "group.id"),
        ({"group.id": "g"}, {}, "bootstrap.servers"),
        (_config(), {"workers": 0}, "workers"),
        (_config(), {"workers": -3}, "workers"),
        (_config(), {"wrokers": 4}, "wrokers"),
        (_config(), {"poison": "explode"}, "poison"),
        (_config(), {"mode": "exclusive", "poison": "drop"}, "poison"),
        (_config(), {"max_window": 0}, "max_window"),
        (_config(), {"commit_interval": 0}, "commit_interval"),
        (_config(), {"drain_timeout": -1}, "drain_timeout"),
        (_config(), {"mode": "sideways"}, "mode"),
        (_config(), {"key_filters": [""]}, "key_filters"),
    ],
    ids=lambda value: repr(value)[:40],
)
def test_invalid_configuration_names_the_option(
    config: dict[str, Any], options: dict[str, Any], option: str
) -> None:
    with pytest.raises(keyshared.ConfigurationError) as caught:
        keyshared.KeySharedConsumer(config, ["t"], print, **options)
    assert caught.value.option == option
    assert option in str(caught.value)


@pytest.mark.parametrize(
    ("prop", "value"),
    [("no.such.property", "1"), ("session.timeout.ms", "not-a-number")],
)
def test_invalid_librdkafka_property_fails_at_construction(prop: str, value: str) -> None:
    """SPEC: invalid configuration fails at construction with a message naming the option.

    A property librdkafka rejects must not wait for ``run()`` (where, with the broker down, it
    would be reported as an unreachable broker instead, or as a raw KafkaException).
    """
    with pytest.raises(keyshared.ConfigurationError) as caught:
        keyshared.KeySharedConsumer(_config(**{prop: value}), ["t"], print)
    assert prop in str(caught.value)


def test_handler_must_be_callable() -> None:
    with pytest.raises(keyshared.ConfigurationError) as caught:
        keyshared.KeySharedConsumer(_config(), ["t"], "not a function")  # type: ignore[arg-type]
    assert caught.value.option == "handler"


# -- unknown topic, unreachable broker: clear errors within a bound ---------------------------


def test_unknown_topic_is_a_clear_error(kafka_bootstrap: str) -> None:
    missing = unique_name("no-such-topic")
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": unique_name("g")},
        [missing],
        print,
        startup_timeout=10,
    )
    started = time.monotonic()
    with pytest.raises(keyshared.ConfigurationError) as caught:
        consumer.run()
    assert time.monotonic() - started < 15
    assert caught.value.option == "topics"
    assert missing in str(caught.value)


def test_unreachable_broker_fails_within_the_startup_timeout() -> None:
    with socket.socket() as sock:  # a port nobody listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"127.0.0.1:{port}"
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": address, "group.id": "g"}, ["t"], print, startup_timeout=3
    )
    started = time.monotonic()
    with pytest.raises(keyshared.UnreachableError) as caught:
        consumer.run()
    elapsed = time.monotonic() - started
    assert elapsed < 8, f"took {elapsed:.1f}s with startup_timeout=3"
    assert address in str(caught.value)


# -- odd keys --------------------------------------------------------------------------------


def _consume_all(
    bootstrap: str,
    topic: str,
    group: str,
    recorder: Recorder,
    expected: int,
    timeout: float = 30,
    **options: Any,
) -> None:
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group},
        [topic],
        recorder,
        poison="drop",
        **options,
    )
    with running(consumer):
        wait_for(lambda: recorder.finished() >= expected, timeout, f"{expected} records")
        wait_committed_to_end(bootstrap, group, topic)


def test_binary_and_non_utf8_keys_keep_their_order(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    topic = new_topic(partitions=2)
    keys = [b"\xff\xfe\xfd", b"\x80", b"\x00", b"\x00\x00", bytes(range(256)), b"caf\xe9"]
    produce(kafka_bootstrap, topic, sequenced(keys, 30))
    recorder = Recorder(lambda r: time.sleep(0.001))
    _consume_all(kafka_bootstrap, topic, new_group(), recorder, 6 * 30, workers=4)
    report = check(recorder.snapshot(), dict.fromkeys(keys, 30))
    assert not report.missing and not report.violations, report.summary()
    assert {e.key for e in recorder.snapshot()} == set(keys)  # byte for byte


def test_empty_key_is_one_ordered_key_and_null_keys_are_unordered(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_bootstrap, topic, sequenced([None, b""], 20))
    meet = threading.Barrier(2, timeout=10)
    met: list[bool] = []

    def work(record: keyshared.Record) -> None:
        if record.key is None and int(record.value) <= 2:
            try:
                meet.wait()  # passes only if two null-key records run at the same time
                met.append(True)
            except threading.BrokenBarrierError:
                met.append(False)
        time.sleep(0.002)

    recorder = Recorder(work)
    _consume_all(kafka_bootstrap, topic, new_group(), recorder, 40, workers=4)
    events = recorder.snapshot()
    empty = check([e for e in events if e.key == b""], {b"": 20})
    assert not empty.missing and not empty.violations, empty.summary()
    assert met == [True, True], "null-key records never ran concurrently"
    assert sum(1 for e in events if e.key is None and e.kind == "E") == 20


def test_null_keys_ordered_when_asked(kafka_bootstrap: str, new_topic, new_group) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_bootstrap, topic, sequenced([None, b"", b"x"], 20))
    recorder = Recorder(lambda r: time.sleep(0.002))
    _consume_all(
        kafka_bootstrap, topic, new_group(), recorder, 60, workers=4, null_keys_ordered=True
    )
    report = check(recorder.snapshot(), {None: 20, b"": 20, b"x": 20})
    assert not report.missing and not report.violations, report.summary()


def test_one_mebibyte_keys(kafka_bootstrap: str, new_topic, new_group) -> None:
    limit = str(4 * 1024 * 1024)
    topic = new_topic(partitions=2, config={"max.message.bytes": limit})
    keys = [bytes([65 + i]) * (1024 * 1024) for i in range(3)]
    produce(
        kafka_bootstrap,
        topic,
        sequenced(keys, 4),
        extra={"message.max.bytes": limit, "batch.size": limit, "linger.ms": 0},
    )
    recorder = Recorder()
    _consume_all(kafka_bootstrap, topic, new_group(), recorder, 12, timeout=60, workers=4)
    report = check(recorder.snapshot(), dict.fromkeys(keys, 4))
    assert not report.missing and not report.violations, report.summary()


# -- a handler raising BaseException ---------------------------------------------------------


class Fatal(BaseException):
    """Not an Exception: escapes ``except Exception`` on purpose."""


class Interrupted(KeyboardInterrupt):
    pass


@pytest.mark.parametrize("error", [Fatal("boom"), SystemExit(3), Interrupted()], ids=repr)
def test_handler_raising_base_exception_takes_the_poison_path(
    kafka_bootstrap: str, new_topic, new_group, error: BaseException
) -> None:
    topic = new_topic(partitions=1)
    dlq = new_topic(partitions=1, prefix="dlq")
    group = new_group()
    produce(kafka_bootstrap, topic, [(b"bad", 1), (b"bad", 2), (b"good", 1), (b"good", 2)])
    calls: list[tuple[bytes, int, int]] = []

    def work(record: keyshared.Record) -> None:
        calls.append((record.key, int(record.value), record.attempt))
        if record.key == b"bad" and int(record.value) == 1:
            raise error

    recorder = Recorder(work)
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group},
        [topic],
        recorder,
        workers=1,  # one thread: it must survive the raise to run the records after it
        poison="dead_letter",
        dlq_topic=dlq,
        retry=keyshared.RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.05),
    )
    with running(consumer):
        wait_for(lambda: recorder.finished() >= 4, 30, "every record")
        wait_committed_to_end(kafka_bootstrap, group, topic)
    # Not an Exception: not retried (retriable is Exception by default), dead-lettered at once.
    assert calls.count((b"bad", 1, 1)) == 1 and not [c for c in calls if c[2] > 1]
    assert {(k, s) for k, s, _ in calls} == {(b"bad", 1), (b"bad", 2), (b"good", 1), (b"good", 2)}
    letters = _read_all(kafka_bootstrap, dlq, 1)
    assert len(letters) == 1
    headers = dict(letters[0].headers())
    assert letters[0].key() == b"bad" and letters[0].value() == b"1"
    assert headers["keyshared.source.topic"] == topic.encode()
    assert headers["keyshared.source.offset"] == b"0"
    assert type(error).__name__.encode() in headers["keyshared.error.class"]


def _read_all(bootstrap: str, topic: str, expected: int) -> list[Any]:
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_name("r"), "enable.auto.commit": False}
    )
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        messages: list[Any] = []
        deadline = time.monotonic() + 15
        while len(messages) < expected and time.monotonic() < deadline:
            messages += [m for m in reader.consume(100, 0.5) if m.error() is None]
        return messages
    finally:
        reader.close()
