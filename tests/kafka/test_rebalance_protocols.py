"""Hand-overs under every group protocol keyshared claims: per-key order and completeness.

One member starts alone, a second joins mid-run (partitions move while records are in flight),
then the first leaves (its partitions move again). A group-wide journal checks, at every
handler start, that no other record of the key is running anywhere in the group and that the
key's previous record has finished — the per-key order guarantee across hand-overs.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import keyshared

RECORDS = 6000
KEYS = 300
PARTITIONS = 4


class GroupJournal:
    """Thread-safe per-key bookkeeping shared by every member of the test's group."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[bytes, int] = {}
        self.finished: dict[bytes, int] = defaultdict(int)
        self.processed: set[tuple[bytes, int]] = set()
        self.violations: list[str] = []
        self.duplicates = 0
        self.by_member: dict[str, int] = defaultdict(int)
        self.all_done = threading.Event()

    def start(self, key: bytes, seq: int) -> None:
        with self.lock:
            if key in self.running:
                self.violations.append(f"{key!r}: {seq} started while {self.running[key]} runs")
            if self.finished[key] < seq - 1:
                self.violations.append(
                    f"{key!r}: {seq} started before {seq - 1} finished "
                    f"(last finished {self.finished[key]})"
                )
            self.running[key] = seq

    def end(self, key: bytes, seq: int, who: str) -> None:
        with self.lock:
            self.by_member[who] += 1
            self.running.pop(key, None)
            if (key, seq) in self.processed:
                self.duplicates += 1
            self.processed.add((key, seq))
            self.finished[key] = max(self.finished[key], seq)
            if len(self.processed) >= RECORDS:
                self.all_done.set()


def produce(bootstrap: str, topic: str, per_second: int = 1000) -> None:
    """Produce at a steady pace, so both members have work whenever they are assigned."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    rng = random.Random(7)
    seqs: dict[bytes, int] = defaultdict(int)
    started = time.monotonic()
    for i in range(RECORDS):
        key = b"key-%d" % rng.randrange(KEYS)
        seqs[key] += 1
        producer.produce(topic, key=key, value=str(seqs[key]).encode())
        if i % 100 == 99:
            producer.poll(0)
            ahead = (i + 1) / per_second - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)  # pacing the load, not synchronisation
    assert producer.flush(30) == 0


def member(
    name: str, bootstrap: str, topic: str, group: str, journal: GroupJournal, extra: dict[str, Any]
) -> keyshared.KeySharedConsumer:
    def handle(record: keyshared.Record) -> None:
        seq = int(record.value)
        journal.start(record.key, seq)
        time.sleep(random.random() * 0.002)
        journal.end(record.key, seq, name)

    config = {"bootstrap.servers": bootstrap, "group.id": group, **extra}
    return keyshared.KeySharedConsumer(
        config, [topic], handle, workers=8, poison="drop", drain_timeout=20.0
    )


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


PROTOCOLS = {
    "cooperative-sticky": {"partition.assignment.strategy": "cooperative-sticky"},
    "eager-range": {"partition.assignment.strategy": "range"},
    "kip848-consumer": {"group.protocol": "consumer"},
}


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_handover_keeps_per_key_order(
    protocol: str, kafka_bootstrap: str, new_topic: Any, new_group: Any
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    group = new_group()
    producing = threading.Thread(target=produce, args=(kafka_bootstrap, topic), daemon=True)
    producing.start()
    journal = GroupJournal()
    extra = PROTOCOLS[protocol]
    first = member("first", kafka_bootstrap, topic, group, journal, extra)
    second = member("second", kafka_bootstrap, topic, group, journal, extra)
    threads = [threading.Thread(target=c.run, daemon=True) for c in (first, second)]
    threads[0].start()
    wait_for(lambda: len(journal.processed) >= RECORDS // 10, 60, "the first member to progress")
    threads[1].start()
    wait_for(lambda: journal.by_member["second"] >= 200, 60, "the joining member to get work")
    first.stop()
    threads[0].join(60)
    assert not threads[0].is_alive(), "the first member did not stop"
    assert journal.all_done.wait(90), f"only {len(journal.processed)} of {RECORDS} processed"
    second.stop()
    threads[1].join(60)
    producing.join(30)

    assert journal.violations == []
    assert journal.by_member["first"] > 0 and journal.by_member["second"] > 0
    # Drains finish before hand-over and commits happen on revoke, so nothing is redone.
    assert journal.duplicates == 0
    committed = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group}).committed(
        [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
    )
    probe = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group + "-probe"})
    ends = [
        probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        for p in range(PARTITIONS)
    ]
    assert [tp.offset for tp in committed] == ends
    if protocol == "kip848-consumer":
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        description = admin.describe_consumer_groups([group])[group].result()
        assert description.type.name == "CONSUMER"
