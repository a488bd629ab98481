"""OpenTelemetry spans per handler call, on the real broker with the real SDK (in-memory export).

What is proved: each attempt is one CONSUMER span, the child of the ``traceparent`` the producer
put in the record's headers; the messaging attributes are set and the key is shown only through
the redaction hook; a retry and the poison decision are events on the failed attempt's span;
the dead letter keeps the trace headers; an ``async def`` handler runs inside its span.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from keyshared import BatchError, Record, RetryPolicy
from keyshared.dev.topics import TopicFactory, create_topic
from keyshared.runtime.tracing import (
    ATTEMPT,
    BATCH_COUNT,
    CONSUMER_GROUP,
    DESTINATION,
    MESSAGE_KEY,
    OFFSET,
    PARTITION,
    POISON_EVENT,
    POISON_POLICY,
    POISON_REASON,
    RETRY_DELAY,
    RETRY_EVENT,
    SYSTEM,
)
from tests.helpers import WAIT
from tests.kafka.support.inprocess import Running, consumers_for
from tests.kafka.support.spans import SpanSink, traced_headers

pytestmark = pytest.mark.integration

RETRY = RetryPolicy(max_attempts=3, initial_backoff=0.05, jitter=0.0)


@pytest.fixture
def start(kafka_bootstrap: str) -> Iterator[Callable[..., Running]]:
    yield from consumers_for(kafka_bootstrap, WAIT, RETRY)


@pytest.fixture
def sink() -> Iterator[SpanSink]:
    spans = SpanSink()
    yield spans
    spans.provider.shutdown()


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes, list[Any]]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers, partition=0)
    assert producer.flush(WAIT) == 0


def read_one(bootstrap: str, topic: str) -> Any:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        for _ in range(int(WAIT / 0.2)):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                return msg
    finally:
        consumer.close()
    raise AssertionError(f"nothing in {topic}")


def processing(topic: str) -> Callable[[ReadableSpan], bool]:
    return lambda span: span.name == f"process {topic}"


def test_each_attempt_is_a_consumer_span_under_the_producers_trace_and_the_dlq_keeps_it(
    kafka_bootstrap: str, new_topic: TopicFactory, new_group: Callable[[str], str],
    start: Callable[..., Running], sink: SpanSink,
) -> None:  # fmt: skip
    topic = new_topic(partitions=1)
    create_topic(AdminClient({"bootstrap.servers": kafka_bootstrap}), f"{topic}.dlq", 1)
    group = new_group("traced")
    good_headers, good_parent = traced_headers(sink.provider)
    bad_headers, bad_parent = traced_headers(sink.provider)
    produce(kafka_bootstrap, topic, [(b"secret-good", b"ok", good_headers),
                                     (b"secret-bad", b"poison", bad_headers)])  # fmt: skip

    def handle(record: Record) -> None:
        if record.value == b"poison":
            raise ValueError("card 4111111111111111 declined")

    mask = lambda text: text.replace("secret", "***").replace("4111111111111111", "<card>")  # noqa: E731
    start(group, topic, handle, poison="dead_letter", redact=mask, tracing=sink.provider)
    letter = read_one(kafka_bootstrap, f"{topic}.dlq")
    spans = sink.wait_for(processing(topic), 4)

    good = [s for s in spans if s.attributes[OFFSET] == 0]
    bad = sorted((s for s in spans if s.attributes[OFFSET] == 1), key=lambda s: s.start_time)
    assert len(good) == 1 and len(bad) == 3, "one span per attempt"
    for span, parent in [(good[0], good_parent)] + [(s, bad_parent) for s in bad]:
        assert span.kind is trace.SpanKind.CONSUMER
        assert span.parent is not None and span.parent.span_id == parent.span_id
        assert span.context.trace_id == parent.trace_id, "continues the producer's trace"
        attributes = span.attributes
        assert attributes[SYSTEM] == "kafka"
        assert attributes[DESTINATION] == topic
        assert attributes[PARTITION] == "0"
        assert attributes[CONSUMER_GROUP] == group
        assert attributes[MESSAGE_KEY].startswith("***-"), "the key only through the hook"
    assert good[0].status.is_ok and not good[0].events
    assert [s.attributes[ATTEMPT] for s in bad] == [1, 2, 3]
    for span in bad:
        assert span.status.status_code is trace.StatusCode.ERROR
        exception = span.events[0]
        assert exception.name == "exception"
        assert exception.attributes["exception.message"] == "card <card> declined"
        assert "4111" not in exception.attributes["exception.stacktrace"]
    assert [s.events[1].name for s in bad] == [RETRY_EVENT, RETRY_EVENT, POISON_EVENT]
    assert bad[0].events[1].attributes[RETRY_DELAY] == pytest.approx(0.05)
    assert bad[2].events[1].attributes[POISON_POLICY] == "dead_letter"
    assert bad[2].events[1].attributes[POISON_REASON] == "exhausted"

    kept = {name: value for name, value in letter.headers() or () if not name.startswith("k")}
    assert kept == dict(bad_headers), "the dead letter keeps the trace headers byte for byte"


def test_an_async_handler_runs_inside_its_span_and_its_retry_is_an_event(
    kafka_bootstrap: str, new_topic: TopicFactory, new_group: Callable[[str], str],
    start: Callable[..., Running], sink: SpanSink,
) -> None:  # fmt: skip
    topic = new_topic(partitions=1)
    headers, parent = traced_headers(sink.provider)
    produce(kafka_bootstrap, topic, [(b"k", b"v", headers)])
    seen: list[Any] = []
    done = threading.Event()

    async def handle(record: Record) -> None:
        await asyncio.sleep(0)
        seen.append(trace.get_current_span().get_span_context())
        if record.attempt == 1:
            raise TimeoutError("downstream slow")
        done.set()

    start(new_group("traced-async"), topic, handle, tracing=sink.provider)
    assert done.wait(WAIT)
    first, second = sorted(sink.wait_for(processing(topic), 2), key=lambda s: s.start_time)
    assert seen == [first.context, second.context], "the current span is the attempt's own"
    for span in (first, second):
        assert span.parent is not None and span.parent.span_id == parent.span_id
    assert [e.name for e in first.events] == ["exception", RETRY_EVENT]
    assert second.status.is_ok and not second.events


def test_a_record_without_trace_headers_starts_a_new_trace(
    kafka_bootstrap: str, new_topic: TopicFactory, new_group: Callable[[str], str],
    start: Callable[..., Running], sink: SpanSink,
) -> None:  # fmt: skip
    topic = new_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(b"k", b"v", [])])
    start(new_group("traced-root"), topic, lambda record: None, tracing=sink.provider)
    [span] = sink.wait_for(processing(topic), 1)
    assert span.parent is None


def test_a_batch_call_is_one_span_linked_to_each_records_producer(
    kafka_bootstrap: str, new_topic: TopicFactory, new_group: Callable[[str], str],
    start: Callable[..., Running], sink: SpanSink,
) -> None:  # fmt: skip
    """A batch has many parents: its span links each record's producer span (OpenTelemetry's
    batch-processing convention), counts the batch, and records a BatchError; the record it
    names comes back in a later batch with a span of its own."""
    topic = new_topic(partitions=1)
    group = new_group("traced-batch")
    parents = {}
    records = []
    for n in range(6):
        headers, parent = traced_headers(sink.provider)
        parents[n] = parent
        records.append((f"k{n}".encode(), str(n).encode(), headers))
    produce(kafka_bootstrap, topic, records)
    failed_once = threading.Event()
    seen: list[int] = []

    def handle(batch: list[Record]) -> None:
        seen.extend(record.offset for record in batch)
        for index, record in enumerate(batch):
            if record.offset == 3 and not failed_once.is_set():
                failed_once.set()
                raise BatchError({index: RuntimeError("offset 3 once")})

    start(group, topic, handle, workers=1, batch_size=6, batch_linger=1.0,
          tracing=sink.provider)  # fmt: skip
    # Every offset ran once, offset 3 twice: the spans' batch counts add up to seven records.
    spans: list[ReadableSpan] = []

    def all_counted(span: ReadableSpan) -> bool:
        return span.name == f"process {topic}"

    for count in range(1, 8):
        spans = sink.wait_for(all_counted, count)
        if sum(s.attributes[BATCH_COUNT] for s in spans) >= 7:
            break
    assert sum(s.attributes[BATCH_COUNT] for s in spans) == 7
    linked = {}
    for span in spans:
        assert span.kind is trace.SpanKind.CONSUMER
        assert span.parent is None, "a batch span is a root; its producers are links"
        assert span.attributes[DESTINATION] == topic and span.attributes[CONSUMER_GROUP] == group
        assert len(span.links) == span.attributes[BATCH_COUNT]
        for link in span.links:
            linked.setdefault(link.attributes[OFFSET], []).append(link.context.span_id)
    for offset, parent in parents.items():
        assert parent.span_id in linked[offset], f"offset {offset} links its producer"
    assert len(linked[3]) == 2, "the failed record is linked again from its retry's batch"
    failed = [s for s in spans if not s.status.is_ok]
    assert len(failed) == 1 and failed[0].events[0].name == "exception"
    assert sorted(seen) == [0, 1, 2, 3, 3, 4, 5]
