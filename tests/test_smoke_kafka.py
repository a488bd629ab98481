"""Smoke test of the session's Kafka broker: the things every other Kafka test relies on."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from keyshared.dev.topics import GroupFactory, TopicFactory, unique_name

MESSAGES = 30
KEYS = 5


@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_round_trip_with_synchronous_commit(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    new_group: GroupFactory,
    group_protocol: str,
) -> None:
    """Produce keyed records, consume them in a group, commit, and read the commit back.

    Both group protocols run, proving the broker has classic and KIP-848 groups enabled.
    """
    topic = new_topic(partitions=3)
    group = new_group()
    sent = [(f"key-{i % KEYS}".encode(), f"value-{i}".encode()) for i in range(MESSAGES)]
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for key, value in sent:
        producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert failures == []

    config: dict[str, str | bool] = {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": group,
        "group.protocol": group_protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    consumer = Consumer(config)
    consumer.subscribe([topic])
    received: list[Message] = []
    deadline = time.monotonic() + 60
    try:
        while len(received) < MESSAGES and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            received.append(message)
        committed = consumer.commit(asynchronous=False)
    finally:
        consumer.close()

    assert sorted((m.key(), m.value()) for m in received) == sorted(sent)
    by_partition: dict[int, list[int]] = defaultdict(list)
    keys_by_partition: dict[bytes | None, set[int]] = defaultdict(set)
    for message in received:
        partition, offset = message.partition(), message.offset()
        assert partition is not None and offset is not None
        by_partition[partition].append(offset)
        keys_by_partition[message.key()].add(partition)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())
    assert all(len(partitions) == 1 for partitions in keys_by_partition.values())
    expected = {partition: len(offsets) for partition, offsets in by_partition.items()}
    assert {tp.partition: tp.offset for tp in committed or []} == expected

    reader = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        stored = reader.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
    finally:
        reader.close()
    assert {tp.partition: tp.offset for tp in stored if tp.offset >= 0} == expected


def test_topics_are_not_auto_created(kafka_bootstrap: str) -> None:
    """keyshared creates its topics explicitly; a typo must fail instead of creating one."""
    topic = unique_name("missing")
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.timeout.ms": 3000})
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._MSG_TIMED_OUT)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert topic not in admin.list_topics(timeout=10).topics
