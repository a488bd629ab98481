"""Pull style (iterate, ack/nack, ack timeout) and ``async def`` handlers (issue 4)."""

from __future__ import annotations

import random
import time

import keyshared
from tests.kafka.support.inprocess import AsyncRecorder, running
from tests.kafka.support.journal import (
    check,
    produce,
    sequenced,
    wait_committed_to_end,
    wait_for,
)

ACK_TIMEOUT = 1.5


def test_pull_ack_nack_and_ack_timeout(kafka_bootstrap: str, new_topic, new_group) -> None:
    topic = new_topic(partitions=1)
    group = new_group("pull")
    keys = [b"A", b"B", b"C"]
    produce(kafka_bootstrap, topic, [(k, s) for s in range(1, 6) for k in keys])
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group},
        [topic],
        None,
        ack_timeout=ACK_TIMEOUT,
        poison="drop",
        retry=keyshared.RetryPolicy(
            max_attempts=5, initial_backoff=0.05, max_backoff=0.1, jitter=0.0
        ),
    )
    deliveries: list[tuple[bytes, int, int, float]] = []  # key, seq, attempt, when
    forgotten: list[keyshared.Record] = []
    acked: set[tuple[bytes, int]] = set()
    deadline = time.monotonic() + 40
    try:
        while len(acked) < 15 and time.monotonic() < deadline:
            for record in consumer.records(timeout=0.3):
                seq = int(record.value)
                deliveries.append((record.key, seq, record.attempt, time.monotonic()))
                if (record.key, seq, record.attempt) == (b"A", 1, 1):
                    forgotten.append(record)  # never acked: the ack timeout must fire
                elif (record.key, seq, record.attempt) == (b"B", 2, 1):
                    assert consumer.nack(record, RuntimeError("try again"))
                else:
                    assert consumer.ack(record)
                    acked.add((record.key, seq))
        assert len(acked) == 15, f"acked {sorted(acked)} before the deadline"
        wait_committed_to_end(kafka_bootstrap, group, topic)
    finally:
        consumer.close(60)

    def of(key: bytes) -> list[tuple[int, int]]:
        return [(seq, attempt) for k, seq, attempt, _ in deliveries if k == key]

    # The forgotten record came back after the ack timeout, and its key waited for it.
    assert of(b"A") == [(1, 1), (1, 2), (2, 1), (3, 1), (4, 1), (5, 1)]
    first, again = (t for k, s, _, t in deliveries if (k, s) == (b"A", 1))
    assert again - first >= ACK_TIMEOUT * 0.9
    # Other keys were not held up meanwhile (B's nack retried, C straight through).
    assert of(b"B") == [(1, 1), (2, 1), (2, 2), (3, 1), (4, 1), (5, 1)]
    assert of(b"C") == [(s, 1) for s in range(1, 6)]
    assert max(t for k, _, _, t in deliveries if k != b"A") < again
    # Acking a record whose ack timeout has passed is refused, not double-counted.
    assert consumer.ack(forgotten[0]) is False


def test_async_handler_keeps_per_key_order(kafka_bootstrap: str, new_topic, new_group) -> None:
    topic = new_topic(partitions=2)
    group = new_group("async")
    keys = [f"key-{i:02d}".encode() for i in range(60)] + [b"slow"]
    produce(kafka_bootstrap, topic, [(b"slow", 1), *sequenced(keys[:-1], 20), (b"slow", 2)])
    rng = random.Random(3)
    slow_seconds = 6.0

    def delay(record: keyshared.Record) -> float:
        if record.key == b"slow" and record.value == b"1":
            return slow_seconds
        return rng.uniform(0, 0.005)

    recorder = AsyncRecorder(delay)
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group},
        [topic],
        recorder,
        workers=16,
        poison="drop",
    )
    with running(consumer):
        wait_for(lambda: recorder.finished() >= 60 * 20 + 2, 60, "every record")
        wait_committed_to_end(kafka_bootstrap, group, topic)
    events = recorder.snapshot()
    expected = {**dict.fromkeys(keys[:-1], 20), b"slow": 2}
    report = check(events, expected)
    assert not report.missing and not report.violations, report.summary()
    assert report.duplicates == 0
    assert 1 < recorder.max_concurrency <= 16, recorder.max_concurrency
    # A slow coroutine holds its key only: every other key finished while it slept.
    slow_end = next(e.t for e in events if e.key == b"slow" and e.seq == 1 and e.kind == "E")
    assert max(e.t for e in events if e.key != b"slow") < slow_end
