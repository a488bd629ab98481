"""Helpers every test layer shares: waiting for an event, and producing known records.

One copy each, so that a change to how tests wait (the poll interval, the failure message) or
produce (idempotence, which keeps librdkafka's retries from reordering a partition) is made once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Producer

__all__ = ["WAIT", "produce", "wait_until"]

WAIT = 60.0  # seconds: generous, because a loaded 2-core CI machine is slow, not broken


def wait_until(
    condition: Callable[[], bool], what: str, timeout: float = WAIT, interval: float = 0.02
) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds.

    For conditions that only a poll can observe (a broker's committed offset, a metric); where
    an event can be awaited, wait on the event instead.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[int, bytes | None, bytes | None]],
    timeout: float = WAIT,
) -> dict[int, list[int]]:
    """Produce ``(partition, key, value)`` records in order; return their offsets by partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    offsets: dict[int, list[int]] = {}
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            offsets.setdefault(msg.partition(), []).append(msg.offset())

    for partition, key, value in records:
        producer.produce(topic, key=key, value=value, partition=partition, on_delivery=delivered)
    assert producer.flush(timeout) == 0, "records still unacknowledged after the flush timeout"
    assert not errors, f"delivery failed: {errors[:3]}"
    return {p: sorted(o) for p, o in offsets.items()}
