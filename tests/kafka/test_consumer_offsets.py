"""Offsets the consumer never sees must not stall the committed cursor (issue 4).

Transaction markers and aborted records (``read_committed``, the default) and compacted-away
records leave gaps in the offsets delivered to the application; the committed offset must still
reach the end of each partition (the high watermark).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import OFFSET_INVALID, Consumer, Producer, TopicPartition

import keyshared
from keyshared.dev.topics import unique_name
from tests.kafka.support.journal import high_watermarks, wait_committed_to_end, wait_for


@contextmanager
def _consumer(
    bootstrap: str, group: str, topic: str, seen: list[tuple[int, int, bytes, bytes]]
) -> Iterator[keyshared.KeySharedConsumer]:
    lock = threading.Lock()

    def handle(record: keyshared.Record) -> None:
        with lock:
            seen.append((record.partition, record.offset, record.key, record.value))

    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group},
        [topic],
        handle,
        workers=4,
        poison="drop",
        commit_interval=0.2,
    )
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        assert consumer.wait_started(30)
        yield consumer
    finally:
        consumer.stop()
        thread.join(60)
        assert not thread.is_alive()


def _transaction(producer: Producer, topic: str, values: list[bytes], commit: bool) -> None:
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i % 10}".encode(), value=value)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)  # the records reach the log, then the abort marker follows
        producer.abort_transaction(30)


def test_transaction_markers_and_aborted_records_do_not_stall_the_cursor(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    topic = new_topic(partitions=2)
    group = new_group("txn")
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_name("txn")}
    )
    producer.init_transactions(30)
    visible: set[bytes] = set()
    for n in range(6):
        values = [f"t{n}-{i}".encode() for i in range(40)]
        commit = n % 2 == 0
        _transaction(producer, topic, values, commit)
        if commit:
            visible.update(values)
    # The log now ends with an abort marker on both partitions.
    seen: list[tuple[int, int, bytes, bytes]] = []
    with _consumer(kafka_bootstrap, group, topic, seen):
        wait_for(lambda: len(seen) >= len(visible), 30, "every committed record")
        wait_committed_to_end(kafka_bootstrap, group, topic)
        # While idle at the end: an aborted transaction delivers nothing but moves the end.
        before = high_watermarks(kafka_bootstrap, topic)
        _transaction(producer, topic, [f"late-{i}".encode() for i in range(20)], commit=False)
        after = high_watermarks(kafka_bootstrap, topic)
        assert after != before
        wait_committed_to_end(kafka_bootstrap, group, topic)
    producer.flush(10)
    assert {value for _, _, _, value in seen} == visible
    assert len(seen) == len(visible), "a committed record was processed twice"
    # And after the shutdown commit, still at the end.
    wait_committed_to_end(kafka_bootstrap, group, topic, timeout=5)


def test_compacted_topic_does_not_stall_the_cursor(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    topic = new_topic(
        partitions=2,
        config={
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "100",
        },
    )
    group = new_group("compacted")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    # Record timestamps one second apart roll a segment per round (segment.ms is measured on
    # them), so every round but the last becomes cleanable without waiting for wall time.
    base = int(time.time() * 1000) - 600_000
    rounds, keys = 30, 20
    # Each round overwrites the hot keys and adds one key of its own, which survives: the
    # survivors are spread over the log with compacted-away gaps between them.
    for r in range(rounds):
        for key in [f"k{k}" for k in range(keys)] + [f"once-{r}"]:
            producer.produce(
                topic, key=key.encode(), value=f"{r}".encode(), timestamp=base + r * 1000
            )
        producer.flush(30)
    ends = high_watermarks(kafka_bootstrap, topic)
    assert sum(ends.values()) == rounds * (keys + 1)

    def surviving() -> int:
        reader = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_name("r")})
        try:
            reader.assign([TopicPartition(topic, p, 0) for p in ends])
            count, deadline = 0, time.monotonic() + 10
            done = {p: end == 0 for p, end in ends.items()}
            while not all(done.values()) and time.monotonic() < deadline:
                for msg in reader.consume(1000, 0.5):
                    if msg.error() is None:
                        count += 1
                        done[msg.partition()] = done[msg.partition()] or (
                            msg.offset() == ends[msg.partition()] - 1
                        )
            return count
        finally:
            reader.close()

    total = rounds * (keys + 1)
    remaining = wait_for(
        lambda: (n := surviving()) < total // 2 and n, 60, "the log cleaner to compact"
    )
    seen: list[tuple[int, int, bytes, bytes]] = []
    # Compaction may go on while we consume; what must arrive is each key's latest value.
    latest = {(f"k{k}".encode(), f"{rounds - 1}".encode()) for k in range(keys)}
    latest |= {(f"once-{r}".encode(), f"{r}".encode()) for r in range(rounds)}
    with _consumer(kafka_bootstrap, group, topic, seen):
        wait_for(
            lambda: latest <= {(key, value) for _, _, key, value in seen},
            30,
            "each key's latest value",
        )
        wait_committed_to_end(kafka_bootstrap, group, topic)
    by_partition: dict[int, list[int]] = {}
    for partition, offset, _, _ in seen:
        by_partition.setdefault(partition, []).append(offset)
    gaps = sum(
        1
        for offsets in by_partition.values()
        for a, b in zip(sorted(offsets), sorted(offsets)[1:], strict=False)
        if b > a + 1
    )
    print(f"compacted: {remaining} of {total} records left, {gaps} gaps in the offsets seen")
    assert gaps > 0


def test_librdkafka_reports_the_old_position_after_a_reassignment_lower_down(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    """Why the poll loop distrusts a position equal to the one at assignment
    (``test_poll_loop.py::test_a_stale_position_after_a_reassignment_never_moves_the_cursor``):
    assigned again at a lower offset, the consumer may report where the previous fetch stood
    until the new fetch delivers (or no position, depending on whether its fetcher has
    processed the assignment yet: both happen). If librdkafka ever changes this, the guard
    costs nothing."""
    topic = new_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(300):
        producer.produce(topic, key=b"k%d" % (i % 7), value=b"v")
    producer.flush(30)
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": new_group("stale"),
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 100)])
        got = 0
        deadline = time.monotonic() + 30
        while got < 200 and time.monotonic() < deadline:
            got += len(consumer.consume(200, 1.0))
        assert got == 200
        (before,) = consumer.position([TopicPartition(topic, 0)])
        consumer.assign([TopicPartition(topic, 0, 150)])
        (after,) = consumer.position([TopicPartition(topic, 0)])
        first = consumer.consume(1, 10.0)
        (delivered,) = consumer.position([TopicPartition(topic, 0)])
    finally:
        consumer.close()
    assert before.offset == 300
    assert after.offset in (300, OFFSET_INVALID), "the position is the new one before a fetch"
    assert [m.offset() for m in first] == [150]
    assert delivered.offset == 151
