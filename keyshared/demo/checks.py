"""After the run: read the DLQ topic back and check the group's committed offsets.

Both are independent of the consumer's own bookkeeping: the dead letters are what a DLQ replay
would see, and committed offsets equal to the end offsets mean a restart would redo nothing.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from keyshared.demo.clientlog import CLIENT_LOG

__all__ = ["DeadLetter", "committed_gaps", "read_dead_letters"]


@dataclass
class DeadLetter:
    key: str
    seq: int
    headers: dict[str, str] = field(default_factory=dict)


def read_dead_letters(
    bootstrap: str, dlq_topic: str, expected: int, timeout: float = 15.0
) -> list[DeadLetter]:
    """Every record of ``dlq_topic`` (stops at ``expected`` records or after ``timeout``)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"demo-dlq-reader-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "logger": CLIENT_LOG,
        }
    )
    consumer.subscribe([dlq_topic])
    letters: list[DeadLetter] = []
    # Nothing expected: still look for a few seconds, so unexpected letters are reported.
    deadline = time.monotonic() + (timeout if expected else 3.0)
    try:
        while time.monotonic() < deadline and (len(letters) < expected or not expected):
            for msg in consumer.consume(100, 0.5):
                if msg.error() is not None:
                    continue
                order = json.loads(msg.value() or b"{}")
                raw = msg.headers() or []
                pairs = raw.items() if isinstance(raw, dict) else raw
                headers = {name: _text(value) for name, value in pairs}
                letters.append(DeadLetter(str(order["customer"]), int(order["seq"]), headers))
    finally:
        consumer.close()
    return letters


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value or ""


def committed_gaps(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """Per partition, records between the group's committed offset and the end (should be 0)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "logger": CLIENT_LOG})
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        committed = consumer.committed(tps, timeout=10)
        gaps = {}
        for tp in committed:
            _low, high = consumer.get_watermark_offsets(tp, timeout=10)
            gaps[tp.partition] = high - max(tp.offset, 0)
        return gaps
    finally:
        consumer.close()
