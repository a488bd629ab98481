"""confluent-kafka's Schema Registry deserializers plug into keyshared unchanged (real broker).

No server that speaks the Confluent Schema Registry API can be run on this machine (see
docs/configuration.md, "Schema Registry"), so: ``JSONDeserializer`` with a given schema needs
no registry, and ``AvroDeserializer`` reads its writer schemas from confluent-kafka's own
in-process registry client (``mock://``), which the serializer registered them in. Both are
the real deserializers; neither works without its ``SerializationContext``, which is what
keyshared must pass. Records they reject take the poison path at once, without retries.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import (
    MessageField,
    SerializationContext,
    StringDeserializer,
)

from keyshared import Record
from keyshared.dev.topics import TopicFactory, create_topic
from keyshared.kafka.dlq import DlqHeader
from tests.helpers import WAIT
from tests.kafka.support.inprocess import Running, consumers_for

pytestmark = pytest.mark.integration

DESERIALIZATION_ERROR = b"keyshared.core.poison.DeserializationError"
FRAME = b"\x00\x00\x00\x00\x01"  # Confluent framing: magic byte 0, then a 4-byte schema id
ORDER_JSON = '{"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}'
ORDER_AVRO = """{"type": "record", "name": "Order", "namespace": "shop",
  "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"}]}"""


@pytest.fixture
def start(kafka_bootstrap: str) -> Iterator[Callable[..., Running]]:
    yield from consumers_for(kafka_bootstrap, WAIT)


class Collect:
    """Keeps what the handler saw; ``wait(n)`` until it has seen ``n`` records."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, Any, int]] = []
        self._cond = threading.Condition()

    def __call__(self, record: Record) -> None:
        with self._cond:
            self.seen.append((record.key, record.value, record.attempt))
            self._cond.notify_all()

    def wait(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.seen) >= count, WAIT), self.seen


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(WAIT) == 0


def read_dlq(bootstrap: str, topic: str, count: int) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[Any] = []
    try:
        for _ in range(int(WAIT / 0.2)):
            if len(found) == count:
                break
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                found.append(msg)
    finally:
        consumer.close()
    assert len(found) == count, f"{len(found)} of {count} dead letters"
    return found


def header(msg: Any, name: str) -> bytes | None:
    values = [value for key, value in msg.headers() or () if key == name]
    return values[-1] if values else None


def test_json_schema_deserializer_validates_and_rejects_to_the_dlq_without_retries(
    kafka_bootstrap: str, new_topic: TopicFactory, new_group: Callable[[str], str],
    start: Callable[..., Running],
) -> None:  # fmt: skip
    topic = new_topic(partitions=1)
    create_topic(AdminClient({"bootstrap.servers": kafka_bootstrap}), f"{topic}.dlq", 1)
    produce(kafka_bootstrap, topic, [
        (b"k1", FRAME + b'{"id": "a"}'),
        (b"k1", FRAME + b'{"name": "no id"}'),  # fails the schema
        (b"k2", b'{"id": "unframed"}'),  # not written by a Schema Registry serializer
        (b"k1", FRAME + b'{"id": "b"}'),
    ])  # fmt: skip
    handler = Collect()
    start(new_group("json-sr"), topic, handler, poison="dead_letter",
          key_deserializer=StringDeserializer("utf_8"),
          value_deserializer=JSONDeserializer(ORDER_JSON))  # fmt: skip
    # k1's and k2's letters run in parallel (different keys), so the DLQ holds them in either
    # order: sort by source offset.
    letters = sorted(
        read_dlq(kafka_bootstrap, f"{topic}.dlq", 2),
        key=lambda m: int(header(m, DlqHeader.SOURCE_OFFSET) or b"-1"),
    )
    handler.wait(2)
    assert handler.seen == [("k1", {"id": "a"}, 1), ("k1", {"id": "b"}, 1)]
    assert [int(header(m, DlqHeader.SOURCE_OFFSET) or b"-1") for m in letters] == [1, 2]
    for letter in letters:
        assert header(letter, DlqHeader.REASON) == b"deserialization"
        assert header(letter, DlqHeader.ATTEMPTS) == b"1", "bad input is not retried"
        assert header(letter, DlqHeader.ERROR_CLASS) == DESERIALIZATION_ERROR
    assert b"required property" in (header(letters[0], DlqHeader.ERROR_MESSAGE) or b"")
    assert b"magic byte" in (header(letters[1], DlqHeader.ERROR_MESSAGE) or b"")


def test_avro_deserializer_reads_writer_schemas_from_the_registry(
    kafka_bootstrap: str, new_topic: TopicFactory, new_group: Callable[[str], str],
    start: Callable[..., Running],
) -> None:  # fmt: skip
    topic = new_topic(partitions=1)
    registry = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    serialize = AvroSerializer(registry, ORDER_AVRO)
    context = SerializationContext(topic, MessageField.VALUE)
    orders = [{"id": f"o-{n}", "amount": n * 100} for n in range(5)]
    produce(kafka_bootstrap, topic, [(b"shop", serialize(o, context)) for o in orders])
    handler = Collect()
    start(new_group("avro-sr"), topic, handler, value_deserializer=AvroDeserializer(registry))
    handler.wait(len(orders))
    assert [value for _, value, _ in handler.seen] == orders
