"""DeadLetterWriter against the real broker: payload and headers, partition mapping and order,
and a DLQ topic that does not exist yet (failures reported, nothing acked, then recovery)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import REGISTRY

from keyshared.dev.topics import TopicFactory, create_topic, delete_topics, unique_name
from keyshared.kafka.dlq import DeadLetterWriter, DlqHeader
from keyshared.metrics import ConsumerMetrics
from keyshared.runtime.scheduler import Scheduler
from keyshared.runtime.sinks import Failure
from tests.helpers import wait_until

pytestmark = pytest.mark.integration

GROUP = "dlq-writer-test"
WAIT = 30.0


# -- helpers ---------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for record in records:
        producer.produce(topic, **record)
    assert producer.flush(WAIT) == 0


def read_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[Any]:
    """Exactly ``count`` records of ``topic`` (all partitions), each partition in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("reader"),
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: list[Any] = []
    deadline = time.monotonic() + WAIT
    try:
        while len(found) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                found.append(msg)
    finally:
        consumer.close()
    assert len(found) == count, f"expected {count} records in {topic}, found {len(found)}"
    return found


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("ends")})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), WAIT, cached=False)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def failures(metrics: ConsumerMetrics, dlq_topic: str) -> float:
    labels = {"group": metrics.group, "member": metrics.member, "dlq_topic": dlq_topic}
    return REGISTRY.get_sample_value("keyshared_dlq_write_failures_total", labels) or 0.0


def written(metrics: ConsumerMetrics, dlq_topic: str) -> float:
    labels = {"group": metrics.group, "member": metrics.member, "dlq_topic": dlq_topic}
    return REGISTRY.get_sample_value("keyshared_dlq_writes_total", labels) or 0.0


class Acks:
    """Counts ``on_acked`` calls per source offset, so "exactly once" can be asserted."""

    def __init__(self, expected: int) -> None:
        self.calls: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        self._expected = expected
        self.all_done = threading.Event()

    def callback(self, msg: Any) -> Callable[[], None]:
        def acked() -> None:
            with self._lock:
                self.calls.append((msg.partition(), msg.offset()))
                if len(self.calls) >= self._expected:
                    self.all_done.set()

        return acked


@pytest.fixture
def scheduler() -> Iterator[Scheduler]:
    s = Scheduler()
    yield s
    s.close()


@pytest.fixture
def metrics() -> ConsumerMetrics:
    return ConsumerMetrics(GROUP, f"m-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def make_writer(
    kafka_bootstrap: str, metrics: ConsumerMetrics, scheduler: Scheduler
) -> Iterator[Callable[[], DeadLetterWriter]]:
    writers: list[DeadLetterWriter] = []

    def make() -> DeadLetterWriter:
        config = {"bootstrap.servers": kafka_bootstrap, "group.id": GROUP,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"}  # fmt: skip
        writer = DeadLetterWriter(
            config, GROUP, lambda topic: f"{topic}.dlq", metrics, scheduler.call_later,
            initial_backoff=0.1, max_backoff=0.5,
        )  # fmt: skip
        writers.append(writer)
        return writer

    yield make
    for writer in writers:
        writer.close(10.0)


def send(writer: DeadLetterWriter, msg: Any, acks: Acks, **overrides: Any) -> None:
    facts: dict[str, Any] = {
        "attempts": 3, "error": ValueError("bad record"), "reason": "exhausted",
        "traceback_text": "Traceback: ...", "first_failure": time.time(),
    }  # fmt: skip
    callbacks: dict[str, Any] = {"still_wanted": lambda: True, "on_acked": acks.callback(msg)}
    for name, value in overrides.items():
        (facts if name in facts else callbacks)[name] = value
    writer.send(msg, Failure(**facts), **callbacks)


# -- tests -----------------------------------------------------------------------------------


def test_dead_letter_keeps_key_value_headers_and_adds_provenance(
    kafka_bootstrap: str, new_topic: TopicFactory, make_writer: Callable[[], DeadLetterWriter],
    metrics: ConsumerMetrics,
) -> None:  # fmt: skip
    source = new_topic(partitions=3)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    create_topic(admin, f"{source}.dlq", 3)
    original_headers = [("trace", b"abc"), ("dup", b"1"), ("dup", b"2"), ("empty", None)]
    produce(kafka_bootstrap, source, [
        {"key": b"\x00\xffkey", "value": b"\x01\x02value", "headers": original_headers,
         "partition": 2, "timestamp": 1_700_000_000_123},
        {"key": None, "value": b"", "partition": 0},
    ])  # fmt: skip
    binary, null_key = sorted(read_all(kafka_bootstrap, source, 3, 2), key=lambda m: -m.partition())
    acks = Acks(expected=2)
    writer = make_writer()
    first_failure = time.time() - 5.0
    long_message = "x" * 5000
    long_traceback = "T" * 10_000 + "raise site"
    before = time.time()
    send(writer, binary, acks, attempts=4, error=KeyError(long_message), reason="not_retriable",
         traceback_text=long_traceback, first_failure=first_failure)  # fmt: skip
    send(writer, null_key, acks, error=None, reason="parked", traceback_text="")
    assert acks.all_done.wait(WAIT)
    after = time.time()

    letters = {m.partition(): m for m in read_all(kafka_bootstrap, f"{source}.dlq", 3, 2)}
    assert sorted(letters) == [0, 2], "same source partition -> same DLQ partition"
    letter = letters[2]
    assert (letter.key(), letter.value()) == (b"\x00\xffkey", b"\x01\x02value")
    headers = letter.headers()
    assert headers[:4] == original_headers, "original headers first, unchanged and in order"
    provenance = dict(headers[4:])
    assert [name for name, _ in headers[4:]] == [
        DlqHeader.SOURCE_TOPIC, DlqHeader.SOURCE_PARTITION, DlqHeader.SOURCE_OFFSET,
        DlqHeader.SOURCE_TIMESTAMP, DlqHeader.GROUP, DlqHeader.ATTEMPTS, DlqHeader.REASON,
        DlqHeader.ERROR_CLASS, DlqHeader.FIRST_FAILURE, DlqHeader.LAST_FAILURE,
        DlqHeader.ERROR_MESSAGE, DlqHeader.TRACEBACK,
    ]  # fmt: skip
    assert provenance[DlqHeader.SOURCE_TOPIC] == source.encode()
    assert provenance[DlqHeader.SOURCE_PARTITION] == b"2"
    assert provenance[DlqHeader.SOURCE_OFFSET] == str(binary.offset()).encode()
    assert provenance[DlqHeader.SOURCE_TIMESTAMP] == b"1700000000123"
    assert provenance[DlqHeader.GROUP] == GROUP.encode()
    assert provenance[DlqHeader.ATTEMPTS] == b"4"
    assert provenance[DlqHeader.REASON] == b"not_retriable"
    assert provenance[DlqHeader.ERROR_CLASS] == b"KeyError"
    message = provenance[DlqHeader.ERROR_MESSAGE]
    assert message is not None and len(message) == 1000 and message.startswith(b"'xxx")
    trace = provenance[DlqHeader.TRACEBACK]
    assert trace is not None and len(trace) == 8000 and trace.endswith(b"raise site")
    assert provenance[DlqHeader.FIRST_FAILURE] == str(int(first_failure * 1000)).encode()
    last = int(provenance[DlqHeader.LAST_FAILURE] or b"0")
    assert int(before * 1000) - 1 <= last <= int(after * 1000) + 1

    tail = letters[0]
    assert (tail.key(), tail.value()) == (None, b""), "null key stays null, empty value empty"
    tail_headers = dict(tail.headers())
    assert tail_headers[DlqHeader.REASON] == b"parked"
    assert tail_headers[DlqHeader.ERROR_CLASS] == b""
    assert tail_headers[DlqHeader.ERROR_MESSAGE] == b""
    assert written(metrics, f"{source}.dlq") == 2
    assert failures(metrics, f"{source}.dlq") == 0


def test_source_partition_maps_to_dlq_partition_modulo_and_keeps_source_order(
    kafka_bootstrap: str, new_topic: TopicFactory, make_writer: Callable[[], DeadLetterWriter],
) -> None:  # fmt: skip
    source = new_topic(partitions=5)
    create_topic(AdminClient({"bootstrap.servers": kafka_bootstrap}), f"{source}.dlq", 2)
    produce(kafka_bootstrap, source, [
        {"key": f"k{i % 3}".encode(), "value": f"{p}:{i}".encode(), "partition": p}
        for i in range(20) for p in range(5)
    ])  # fmt: skip
    messages = read_all(kafka_bootstrap, source, 5, 100)
    acks = Acks(expected=100)
    writer = make_writer()
    for msg in messages:  # partitions interleaved as a consumer would see them
        send(writer, msg, acks)
    assert acks.all_done.wait(WAIT)
    assert sorted(acks.calls) == sorted((m.partition(), m.offset()) for m in messages)

    letters = read_all(kafka_bootstrap, f"{source}.dlq", 2, 100)
    for letter in letters:
        source_partition = int(dict(letter.headers())[DlqHeader.SOURCE_PARTITION] or b"-1")
        assert letter.partition() == source_partition % 2
    for p in range(5):
        values = [m.value() for m in letters if m.value().startswith(f"{p}:".encode())]
        assert values == [f"{p}:{i}".encode() for i in range(20)], f"source partition {p}"


def test_missing_dlq_topic_fails_fast_holds_acks_and_recovers_exactly_once(
    kafka_bootstrap: str, new_topic: TopicFactory, make_writer: Callable[[], DeadLetterWriter],
    metrics: ConsumerMetrics, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    source = new_topic(partitions=2)
    dlq = f"{source}.dlq"
    produce(kafka_bootstrap, source, [
        {"key": b"k", "value": str(i).encode(), "partition": i % 2} for i in range(6)
    ])  # fmt: skip
    messages = read_all(kafka_bootstrap, source, 2, 6)
    acks = Acks(expected=6)
    writer = make_writer()
    caplog.set_level(logging.ERROR, logger="keyshared.kafka.dlq")
    started = time.monotonic()
    for msg in messages:
        send(writer, msg, acks)
    wait_until(lambda: failures(metrics, dlq) >= 3, "three failed tries of the missing DLQ")
    assert time.monotonic() - started < 10.0, "a missing topic must fail fast, not time out"
    assert acks.calls == [], "nothing may count as done while the DLQ is missing"
    assert written(metrics, dlq) == 0
    first = messages[0]
    assert any(
        record.levelno == logging.ERROR
        and f"{source}[{first.partition()}]@{first.offset()}" in record.getMessage()
        and repr(dlq) in record.getMessage()
        for record in caplog.records
    ), "the error log names the source record and the DLQ topic"

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    create_topic(admin, dlq, 2)
    try:
        assert acks.all_done.wait(WAIT)
        letters = read_all(kafka_bootstrap, dlq, 2, 6)
        assert end_offsets(kafka_bootstrap, dlq, 2) == [3, 3], "each dead letter written once"
        assert sorted(acks.calls) == sorted((m.partition(), m.offset()) for m in messages)
        for p in range(2):
            got = [m.value() for m in letters if m.partition() == p]
            assert got == [m.value() for m in messages if m.partition() == p], "source order"
        assert written(metrics, dlq) == 6
    finally:
        delete_topics(admin, [dlq])


def test_letter_no_longer_wanted_is_dropped_not_written(
    kafka_bootstrap: str, new_topic: TopicFactory, make_writer: Callable[[], DeadLetterWriter],
    metrics: ConsumerMetrics,
) -> None:  # fmt: skip
    source = new_topic(partitions=1)
    dlq = f"{source}.dlq"
    produce(kafka_bootstrap, source, [{"key": b"k", "value": b"lost-partition"},
                                      {"key": b"k2", "value": b"still-owned"}])  # fmt: skip
    lost, owned = read_all(kafka_bootstrap, source, 1, 2)
    acks = Acks(expected=1)
    wanted = threading.Event()
    wanted.set()
    writer = make_writer()
    send(writer, lost, acks, still_wanted=wanted.is_set)
    wait_until(lambda: failures(metrics, dlq) >= 1, "the first failed try")
    wanted.clear()  # the partition was revoked: the record goes to its next owner instead
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    create_topic(admin, dlq, 1)
    try:
        send(writer, owned, acks)
        assert acks.all_done.wait(WAIT)
        assert acks.calls == [(0, owned.offset())]
        assert [m.value() for m in read_all(kafka_bootstrap, dlq, 1, 1)] == [b"still-owned"]
        assert end_offsets(kafka_bootstrap, dlq, 1) == [1]
    finally:
        delete_topics(admin, [dlq])
