"""Traces from producer to handler: one OpenTelemetry span per handler call (``tracing=``).

Run against the local cluster (one command; needs ``pip install 'keyshared[otel]'
opentelemetry-sdk``)::

    eval "$(keyshared dev up)" && python examples/traced_consumer.py --payments 50

What it shows: the producer sends each payment inside a ``send`` span and puts its W3C
``traceparent`` in the record's headers (``opentelemetry.propagate.inject``), as an instrumented
service would. The consumer is built with ``tracing=provider``: each handler call is a
``process <topic>`` span of kind CONSUMER, the child of that producer span, with the messaging
attributes (topic, partition, offset, consumer group, the key through the redaction hook). The
handler's own span ("charge") is a child of it, because keyshared makes the process span
current. One payment always fails: its three attempts are three spans, the first two with a
``keyshared.retry`` event and the last with ``keyshared.poison`` (``dead_letter``); its dead
letter keeps the ``traceparent`` header, so a replay (``keyshared dlq replay``) continues the
same trace. ``--console`` also prints every span as JSON (the SDK's ConsoleSpanExporter); in
production you would add an OTLP exporter instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import keyshared

BAD = "payment-13"  # always declined: dead-lettered after its last attempt


def ensure_topics(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(topic, 3, 1), NewTopic(f"{topic}.dlq", 1, 1)]
    ).values():
        try:
            future.result(30)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise


def send(bootstrap: str, topic: str, tracer: trace.Tracer, run: str, count: int) -> dict[str, int]:
    """Produce ``count`` payments, each in its own ``send`` span; return each one's trace id."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    traces = {}
    for n in range(count):
        payment = f"payment-{n}"
        with tracer.start_as_current_span("send", kind=trace.SpanKind.PRODUCER) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)  # traceparent (and tracestate) of the current span
            headers = [(name, value.encode()) for name, value in carrier.items()]
            producer.produce(topic, key=payment.encode(), value=run.encode(), headers=headers)
            traces[payment] = span.get_span_context().trace_id
    if producer.flush(60):
        raise RuntimeError("payments not acknowledged within 60 s")
    return traces


def dead_letter_traceparent(bootstrap: str, topic: str, run: str) -> str | None:
    """The traceparent header of this run's dead letter (waits up to 60 s for it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dlq-reader-{run}"})
    consumer.assign([TopicPartition(f"{topic}.dlq", 0, 0)])
    try:
        for _ in range(300):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None and msg.value() == run.encode():
                return dict(msg.headers() or ()).get("traceparent", b"").decode() or None
    finally:
        consumer.close()
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KEYSHARED_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
    )
    parser.add_argument("--topic", default="traced-payments")
    parser.add_argument("--payments", type=int, default=50)
    parser.add_argument("--console", action="store_true", help="print every span as JSON")
    args = parser.parse_args(argv)
    if args.payments <= 13:
        parser.error("--payments must be above 13 (payment-13 is the one that fails)")

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    if args.console:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    tracer = provider.get_tracer("payments-example")

    ensure_topics(args.bootstrap_servers, args.topic)
    run = uuid.uuid4().hex[:8]
    traces = send(args.bootstrap_servers, args.topic, tracer, run, args.payments)
    charged: set[str] = set()
    lock = threading.Lock()
    all_done = threading.Event()

    def charge(record: keyshared.Record) -> None:
        if record.value != run.encode():
            return  # a payment of an earlier run of this example
        with tracer.start_as_current_span("charge"):  # a child of keyshared's process span
            if record.key == BAD:
                raise ValueError("card declined")
        with lock:
            charged.add(record.key)
            if len(charged) == args.payments - 1:
                all_done.set()

    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": args.bootstrap_servers, "group.id": f"payments-{run}"},
        [args.topic],
        charge,
        workers=8,
        key_deserializer=lambda key: key.decode(),
        retry=keyshared.RetryPolicy(max_attempts=3, initial_backoff=0.05),
        tracing=provider,
    )
    thread = threading.Thread(target=consumer.run, name="consumer")
    thread.start()
    all_done.wait(120)
    dlq_traceparent = dead_letter_traceparent(args.bootstrap_servers, args.topic, run)
    consumer.stop()
    thread.join()
    provider.shutdown()

    finished = spans.get_finished_spans()
    ours = set(traces.values())  # records of earlier runs of this example are in other traces
    process = [
        s for s in finished if s.name == f"process {args.topic}" and s.context.trace_id in ours
    ]
    by_id = {s.context.span_id: s for s in finished}
    in_trace = sum(
        1
        for s in process
        if s.parent is not None
        and by_id.get(s.parent.span_id, s).name == "send"
        and s.context.trace_id == traces[s.attributes["messaging.kafka.message.key"]]
    )
    bad = sorted(
        (s for s in process if s.attributes["messaging.kafka.message.key"] == BAD),
        key=lambda s: s.start_time,
    )
    events = [
        e.attributes.get("keyshared.poison.policy", "retry")
        for s in bad
        for e in s.events
        if e.name != "exception"
    ]
    process_ids = {s.context.span_id for s in process}
    charges = sum(
        1 for s in finished if s.name == "charge" and s.parent and s.parent.span_id in process_ids
    )
    bad_trace = f"{traces[BAD]:032x}"
    kept = bool(dlq_traceparent and bad_trace in dlq_traceparent)
    print(
        f"{len(charged)}/{args.payments - 1} payments charged; {len(process)} process spans, "
        f"{in_trace} in their producer's trace; {charges} charge spans under them; "
        f"{BAD}: {len(bad)} attempts ({', '.join(events)}); "
        f"its dead letter keeps the traceparent of trace {bad_trace}: {kept}"
    )
    ok = in_trace == len(process) == charges == args.payments + 2 and kept
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
