"""Avro orders through Schema Registry: confluent-kafka's own deserializers, plugged in unchanged.

Run against the local cluster (one command)::

    eval "$(keyshared dev up)" && python examples/avro_schema_registry.py --orders 500

With a Schema Registry (Confluent's, or any server that speaks its API such as Apicurio's
``/apis/ccompat/v7``), pass ``--schema-registry http://127.0.0.1:8081``. Without one, the example
uses confluent-kafka's in-process registry (``mock://``), so it runs anywhere; the serializer and
the deserializer are the same either way.

What it shows: the producer writes orders with ``AvroSerializer`` (which registers the schema and
prefixes each value with its schema id); the consumer is given ``AvroDeserializer(registry)`` and
``StringDeserializer`` exactly as a ``DeserializingConsumer`` would be, and its handler receives
dicts and ``str`` keys. Each customer's orders arrive in order while customers run in parallel.
One record that no Avro serializer wrote takes the poison path at once (no retries: the bytes
will not change) and lands in the DLQ with reason ``deserialization``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import (
    MessageField,
    SerializationContext,
    StringDeserializer,
    StringSerializer,
)

import keyshared

ORDER_SCHEMA = """
{"type": "record", "name": "Order", "namespace": "shop",
 "fields": [{"name": "run", "type": "string"},
            {"name": "customer", "type": "string"},
            {"name": "seq", "type": "int"},
            {"name": "amount_cents", "type": "long"}]}
"""


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


def produce_orders(
    bootstrap: str,
    topic: str,
    registry: SchemaRegistryClient,
    run: str,
    orders: int,
    customers: int,
) -> None:
    """``orders`` Avro orders spread over ``customers``, then one record no serializer wrote."""
    to_avro = AvroSerializer(registry, ORDER_SCHEMA)
    to_key = StringSerializer("utf_8")
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    seq: dict[str, int] = {}
    for n in range(orders):
        customer = f"customer-{n % customers}"
        seq[customer] = seq.get(customer, 0) + 1
        order = {"run": run, "customer": customer, "seq": seq[customer], "amount_cents": 100 + n}
        producer.produce(topic, key=to_key(customer), value=to_avro(order, context))
    producer.produce(topic, key=to_key(f"legacy-{run}"), value=b'{"not": "avro"}')
    if producer.flush(60):
        raise RuntimeError("orders not acknowledged within 60 s")


def dead_letters(bootstrap: str, topic: str, run: str, timeout: float) -> list[tuple[str, str]]:
    """(reason, attempts) of this run's dead letters, once one is there (or the timeout)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dlq-reader-{run}"})
    consumer.assign([TopicPartition(f"{topic}.dlq", 0, 0)])
    found: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout
    try:
        while not found and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None or msg.key() != f"legacy-{run}".encode():
                continue
            headers = {k: (v or b"").decode() for k, v in msg.headers() or ()}
            found.append((headers["keyshared.reason"], headers["keyshared.attempts"]))
    finally:
        consumer.close()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KEYSHARED_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
    )
    parser.add_argument(
        "--schema-registry",
        default=os.environ.get("KEYSHARED_SCHEMA_REGISTRY_URL", "mock://keyshared-example"),
        help="Schema Registry URL (default: confluent-kafka's in-process registry, mock://)",
    )
    parser.add_argument("--topic", default="avro-orders")
    parser.add_argument("--orders", type=int, default=500)
    parser.add_argument("--customers", type=int, default=50)
    args = parser.parse_args(argv)

    ensure_topics(args.bootstrap_servers, args.topic)
    registry = SchemaRegistryClient.new_client({"url": args.schema_registry})
    run = uuid.uuid4().hex[:8]
    produce_orders(args.bootstrap_servers, args.topic, registry, run, args.orders, args.customers)

    last_seq: dict[str, int] = {}
    totals = {"orders": 0, "cents": 0, "out_of_order": 0}
    lock = threading.Lock()
    all_done = threading.Event()

    def handle(record: keyshared.Record) -> None:
        order = record.value  # a dict, decoded by AvroDeserializer with the writer's schema
        if order["run"] != run:
            return  # an order of an earlier run of this example
        with lock:
            if order["seq"] != last_seq.get(record.key, 0) + 1:
                totals["out_of_order"] += 1
            last_seq[record.key] = order["seq"]
            totals["orders"] += 1
            totals["cents"] += order["amount_cents"]
            if totals["orders"] == args.orders:
                all_done.set()

    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": args.bootstrap_servers, "group.id": f"avro-orders-{run}"},
        [args.topic],
        handle,
        workers=16,
        key_deserializer=StringDeserializer("utf_8"),
        value_deserializer=AvroDeserializer(registry),
    )
    thread = threading.Thread(target=consumer.run, name="consumer")
    thread.start()
    finished = all_done.wait(120)
    letters = dead_letters(args.bootstrap_servers, args.topic, run, 60)
    consumer.stop()
    thread.join()
    if not finished:
        print(f"only {totals['orders']}/{args.orders} orders handled", file=sys.stderr)
        return 1
    reason, attempts = letters[0] if letters else ("none", "0")
    print(
        f"{totals['orders']}/{args.orders} Avro orders of {len(last_seq)} customers decoded "
        f"(schema from {args.schema_registry}), total {totals['cents'] / 100:.2f}; "
        f"out-of-order {totals['out_of_order']}; "
        f"undecodable record dead-lettered: reason {reason}, attempts {attempts}"
    )
    return 0 if totals["out_of_order"] == 0 and letters else 1


if __name__ == "__main__":
    sys.exit(main())
