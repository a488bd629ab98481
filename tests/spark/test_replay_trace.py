"""A dead letter replayed on Spark is processed in the trace its producer started.

End to end with the real SDK (in-memory export): a traced consumer dead-letters a record whose
headers carry a ``traceparent``; Spark's replay writes it back to its source topic; the traced
consumer, now able to handle it, processes the replayed copy in a span of the same trace, under
the same producer span as the failed attempt.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from keyshared import Record, RetryPolicy
from keyshared.dev.topics import TopicFactory
from keyshared.spark import plan_replay, read_dlq, replay
from tests.kafka.support.inprocess import Running, consumers_for
from tests.kafka.support.spans import SpanSink, traced_headers
from tests.spark.support import WAIT, read_all

ONCE = RetryPolicy(max_attempts=1)


@pytest.fixture
def start(kafka_bootstrap: str) -> Iterator[Callable[..., Running]]:
    yield from consumers_for(kafka_bootstrap, WAIT, ONCE)


def test_a_replayed_dead_letter_continues_its_producers_trace(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory,
    new_group: Callable[[str], str], start: Callable[..., Running],
) -> None:  # fmt: skip
    sink = SpanSink()
    source = new_topic(1, prefix="src")
    dlq = new_topic(1, prefix="dlq")
    headers, producer_span = traced_headers(sink.provider)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(source, key=b"order-1", value=b"pay", headers=headers, partition=0)
    assert producer.flush(WAIT) == 0

    broken = threading.Event()
    broken.set()
    handled = threading.Event()

    def handle(record: Record) -> None:
        if broken.is_set():
            raise RuntimeError("payment service down")
        handled.set()

    group = new_group("replay-trace")
    first = start(group, source, handle, dlq_topic=dlq, tracing=sink.provider)
    sink.wait_for(lambda s: s.name == f"process {source}", 1)
    first.stop()  # drains: returns once the dead letter is acknowledged
    [letter] = read_all(kafka_bootstrap, dlq, 1)
    assert dict(letter.headers())["traceparent"] == dict(headers)["traceparent"]

    result = replay(plan_replay(read_dlq(spark, kafka_bootstrap, dlq)), kafka_bootstrap,
                    partitions=1)  # fmt: skip
    assert result.written == 1
    broken.clear()
    start(group, source, handle, dlq_topic=dlq, tracing=sink.provider)
    assert handled.wait(WAIT)

    failed, replayed = sink.wait_for(lambda s: s.name == f"process {source}", 2)
    assert (failed.attributes or {})["messaging.kafka.offset"] == 0
    assert (replayed.attributes or {})["messaging.kafka.offset"] == 1, "the replayed copy"
    for span in (failed, replayed):
        assert span.context.trace_id == producer_span.trace_id, "one trace, end to end"
        assert span.parent is not None and span.parent.span_id == producer_span.span_id
    sink.provider.shutdown()
