"""Building DLQs and reading topics back, for the Spark tests."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from keyshared.kafka.dlq import DlqHeader, provenance_headers

WAIT = 60.0


class SourceRecord:
    """What ``provenance_headers`` reads of a ``confluent_kafka.Message``."""

    def __init__(self, topic: str, partition: int, offset: int, headers: Any = None) -> None:
        self._t, self._p, self._o, self._h = topic, partition, offset, headers

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self._o)

    def headers(self) -> Any:
        return self._h


def write_dlq(
    bootstrap: str,
    dlq: str,
    source: str,
    records: list[tuple[int, int, bytes | None, bytes]],
    *,
    group: str = "g",
    error: BaseException | None = None,
    dlq_partitions: int = 1,
) -> None:
    """Dead letters as the live consumer writes them, from ``(partition, offset, key, value)``:
    a key's first record is ``exhausted`` with ``error``, its later ones ``parked``."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    seen: set[bytes | None] = set()
    for partition, offset, key, value in records:
        first = key is None or key not in seen
        seen.add(key)
        headers = provenance_headers(
            SourceRecord(source, partition, offset, [("trace", b"t-%d" % offset)]),
            group, 3, (error or ValueError("boom")) if first else None,
            "exhausted" if first else "parked", "", time.time(),
        )  # fmt: skip
        producer.produce(dlq, key=key, value=value, headers=headers,
                         partition=partition % dlq_partitions)  # fmt: skip
    assert producer.flush(WAIT) == 0


def read_all(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Every committed record of ``topic`` (read_committed), in partition then offset order."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex}",
        "enable.partition.eof": True, "isolation.level": "read_committed",
        "enable.auto.commit": False,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: list[Any] = []
    waiting = set(range(partitions))
    deadline = time.monotonic() + WAIT
    try:
        while waiting and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                waiting.discard(msg.partition())
                continue
            found.append(msg)
    finally:
        consumer.close()
    assert not waiting, f"{topic}: partitions {waiting} not read to the end"
    return sorted(found, key=lambda m: (m.partition(), m.offset()))


def by_key(messages: list[Any]) -> dict[bytes | None, list[bytes]]:
    """Values per key, in log order (partition, then offset)."""
    out: dict[bytes | None, list[bytes]] = defaultdict(list)
    for msg in messages:
        out[msg.key()].append(msg.value())
    return dict(out)


def header(msg: Any, name: str) -> bytes | None:
    """The last value of header ``name`` of a message."""
    found = None
    for key, value in msg.headers() or ():
        if key == name:
            found = value
    return found


__all__ = ["WAIT", "DlqHeader", "by_key", "header", "read_all", "write_dlq"]
