"""A partition paused when it left must fetch again when it comes back.

librdkafka keeps an application's pause on the partition, not on the assignment: a partition
paused (its window full, or held for an exactly-once redo) that is revoked and later assigned
to the same consumer again stays paused. Every owner of such a pause forgets it with the
partition, so nothing would ever resume it: the partition would stall for good, silently.
Measured before the fix: the partition came back and not one of its records arrived.
"""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import Consumer, Producer

import keyshared
from tests.kafka.support.journal import wait_for

PER_PARTITION = 40


def test_a_partition_paused_when_revoked_fetches_again_when_assigned_back(
    kafka_bootstrap: str, new_topic: Any, new_group: Any
) -> None:
    topic = new_topic(partitions=2)
    group = new_group()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition in (0, 1):
        for i in range(PER_PARTITION):
            producer.produce(topic, b"%d" % i, b"k%d-%d" % (partition, i), partition=partition)
    assert producer.flush(30) == 0

    gate = threading.Event()  # handlers block until set: the windows fill and pause
    seen: set[tuple[int, int]] = set()
    lock = threading.Lock()

    def handle(record: keyshared.Record) -> None:
        gate.wait(60)
        with lock:
            seen.add((record.partition, record.offset))

    strategy = {"partition.assignment.strategy": "cooperative-sticky"}
    member = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group, **strategy,
         "auto.offset.reset": "earliest"},
        [topic], handle, workers=2, max_window=8, per_worker_capacity=8, poison="drop",
        drain_timeout=0.5,
    )  # fmt: skip
    running = threading.Thread(target=member.run, daemon=True)
    running.start()
    try:
        wait_for(
            lambda: member._parts.loop is not None and len(member._parts.loop.paused) == 2,
            60,
            "both windows to fill and pause",
        )

        # A second member takes one partition (the sticky assignor moves one), then leaves:
        # the first gets it back, still paused in librdkafka unless its revoke resumed it.
        other = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, **strategy,
                          "enable.auto.commit": False})  # fmt: skip
        other.subscribe([topic])
        wait_for(lambda: other.consume(1, 0.2) is not None and other.assignment(), 60,
                 "the second member to be given a partition")  # fmt: skip
        moved = other.assignment()[0].partition
        wait_for(lambda: list(member._parts.loop.states) == [(topic, 1 - moved)], 60,
                 "the first member to let the moved partition go")  # fmt: skip
        other.close()
        wait_for(lambda: len(member._parts.loop.states) == 2, 60, "the partition to come back")

        gate.set()
        wait_for(
            lambda: len(seen) == 2 * PER_PARTITION,
            60,
            f"every record of both partitions (partition {moved} moved and came back)",
        )
    finally:
        gate.set()
        member.stop()
        running.join(60)
    assert not running.is_alive()
    assert {p for p, _ in seen} == {0, 1}
