"""Mixed producer partitioners, detected against a real broker.

The same keys are produced once with librdkafka's default partitioner (``consistent_random``,
CRC32) and once with ``murmur2_random`` (the Java client's): most keys land in two partitions.
The consumer must count them in ``keyshared_keys_split_across_partitions_total`` and warn once,
with the fix; a topic whose producers agree must count nothing.
"""

from __future__ import annotations

import logging
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Producer

import keyshared
from tests.helpers import WAIT, wait_until
from tests.kafka.support.inprocess import running

KEYS = [b"order-%d" % i for i in range(400)]
METRIC = "keyshared_keys_split_across_partitions_total"


def _produce(bootstrap: str, topic: str, partitioner: str) -> dict[bytes, int]:
    """Each key once, with ``partitioner``; returns the partition each key landed in."""
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": partitioner})
    landed: dict[bytes, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        landed[msg.key()] = msg.partition()

    for key in KEYS:
        producer.produce(topic, key=key, value=b"1", on_delivery=delivered)
    assert producer.flush(WAIT) == 0
    return landed


def _split_count(url: str, topic: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(METRIC + "{") and f'topic="{topic}"' in line:
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{METRIC} for {topic} is not exported")


@pytest.mark.parametrize("second", ["consistent_random", "murmur2_random"])
def test_keys_split_by_mixed_partitioners_are_counted_and_logged_once(
    kafka_bootstrap: str,
    new_topic: Any,
    new_group: Any,
    caplog: pytest.LogCaptureFixture,
    second: str,
) -> None:
    topic = new_topic(partitions=8)
    first = _produce(kafka_bootstrap, topic, "murmur2_random")
    again = _produce(kafka_bootstrap, topic, second)
    split = [k for k in KEYS if first[k] != again[k]]
    mixed = second != "murmur2_random"
    assert (len(split) > 300) if mixed else not split  # CRC32 and murmur2 disagree on most keys

    caplog.set_level(logging.WARNING, logger="keyshared.kafka.split_keys")
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": new_group()},
        [topic],
        lambda record: None,
        workers=2,
        metrics_port=0,
    )
    with running(consumer):
        url: Any = consumer.metrics_url
        assert _split_count(url, topic) == 0.0  # exported at zero from the first scrape
        # The safe cursors are sampled right after the split keys are counted: once they
        # cover every record, every record was checked.
        wait_until(lambda: _safe_cursors(url, topic) == 2 * len(KEYS), "every record admitted")
        count = _split_count(url, topic)
    # Sampled: about one split key in 16 is tracked, and every tracked one is found.
    assert count <= len(split)
    warnings = [r.getMessage() for r in caplog.records if "partitions" in r.getMessage()]
    if mixed:
        assert len(warnings) == 1, warnings
        assert f"of topic {topic} arrived in partitions" in warnings[0]
        assert "partitioner=murmur2_random" in warnings[0]
    else:
        assert count == 0 and not warnings


def _safe_cursors(url: str, topic: str) -> float:
    total = 0.0
    with urllib.request.urlopen(url, timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("keyshared_partition_safe_cursor_offset{") and topic in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


def java_partition(key: bytes, partitions: int) -> int:
    """The Java client's default partition of a keyed record: murmur2, made positive, modulo."""
    m, h = 0x5BD1E995, (0x9747B28C ^ len(key)) & 0xFFFFFFFF
    whole = len(key) - len(key) % 4
    for i in range(0, whole, 4):
        k = (int.from_bytes(key[i : i + 4], "little") * m) & 0xFFFFFFFF
        k = ((k ^ (k >> 24)) * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = key[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h = ((h ^ tail[0]) * m) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * m) & 0xFFFFFFFF
    return ((h ^ (h >> 15)) & 0x7FFFFFFF) % partitions


def test_our_keyed_producers_put_keys_where_java_producers_do(
    kafka_bootstrap: str, new_topic: Any
) -> None:
    """The bench and demo producers use ``KEYED_PRODUCER``; it must mean Java's partitioning."""
    from keyshared.bench.workload import produce

    topic = new_topic(partitions=8)
    keys = [b"k%d" % i for i in range(300)] + [b"", b"a", b"ab", b"abc"]
    assert produce(kafka_bootstrap, topic, keys) == len(keys)
    landed = _read_partitions(kafka_bootstrap, topic, len(keys))
    wrong = {k: p for k, p in landed.items() if p != java_partition(k, 8)}
    assert not wrong, f"{len(wrong)} keys not where murmur2 puts them: {list(wrong.items())[:3]}"


def _read_partitions(bootstrap: str, topic: str, count: int) -> dict[bytes, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(8)])
    landed: dict[bytes, int] = {}
    try:
        wait_until(lambda: _drain(consumer, landed) >= count, "every record read back")
    finally:
        consumer.close()
    return landed


def _drain(consumer: Any, landed: dict[bytes, int]) -> int:
    for msg in consumer.consume(500, 0.2):
        if msg.error() is None:
            landed[msg.key() or b""] = msg.partition()
    return len(landed)
