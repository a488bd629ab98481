"""Group tests in one process: paced sequenced production, members in threads, one journal.

Every record's value is its per-key sequence number. The journal is shared by all members of
the test's group, so at every handler start it can check the group-wide guarantee: no other
record of the key runs anywhere, and the key's previous record has finished.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

import keyshared


class GroupJournal:
    """Thread-safe per-key bookkeeping shared by every member of the test's group."""

    def __init__(self, expected: float = float("inf")) -> None:
        self.expected = expected
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
            if len(self.processed) >= self.expected:
                self.all_done.set()

    def expect(self, total: int) -> None:
        """The number of records produced, once production is over."""
        with self.lock:
            self.expected = total
            if len(self.processed) >= total:
                self.all_done.set()

    def count(self) -> int:
        with self.lock:
            return len(self.processed)


def produce_paced(
    bootstrap: str,
    topic: str,
    records: int,
    keys: int,
    per_second: int = 1000,
    until: threading.Event | None = None,
) -> int:
    """Produce sequenced records at a steady pace (idempotent: no source reorder).

    Produces ``records``, and with ``until`` goes on (up to 10x as many) until it is set, so a
    test can keep traffic flowing until the moment it needs has come. Returns the count.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    rng = random.Random(7)
    seqs: dict[bytes, int] = defaultdict(int)
    started = time.monotonic()
    produced = 0
    for i in range(records * (10 if until is not None else 1)):
        if until is not None and i >= records and until.is_set():
            break
        produced += 1
        key = b"key-%d" % rng.randrange(keys)
        seqs[key] += 1
        producer.produce(topic, key=key, value=str(seqs[key]).encode())
        if i % 100 == 99:
            producer.poll(0)
            ahead = (i + 1) / per_second - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)  # pacing the load, not synchronisation
    assert producer.flush(60) == 0
    return produced


def journaled_member(
    name: str,
    bootstrap: str,
    topic: str,
    group: str,
    journal: GroupJournal,
    extra: dict[str, Any] | None = None,
    **options: Any,
) -> keyshared.KeySharedConsumer:
    """A member whose handler journals start/end and sleeps 0-2 ms (an I/O-like call)."""

    def handle(record: keyshared.Record) -> None:
        seq = int(record.value)
        journal.start(record.key, seq)
        time.sleep(random.random() * 0.002)
        journal.end(record.key, seq, name)

    config = {"bootstrap.servers": bootstrap, "group.id": group, **(extra or {})}
    options.setdefault("workers", 8)
    options.setdefault("poison", "drop")
    options.setdefault("drain_timeout", 20.0)
    return keyshared.KeySharedConsumer(config, [topic], handle, **options)


def committed_and_ends(
    bootstrap: str, topic: str, group: str, partitions: int
) -> tuple[list[int], list[int]]:
    """The group's committed offsets and the partitions' high watermarks."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    committed = Consumer({"bootstrap.servers": bootstrap, "group.id": group}).committed(
        tps, timeout=10
    )
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group + "-probe"})
    ends = [probe.get_watermark_offsets(tp, timeout=10)[1] for tp in tps]
    return [tp.offset for tp in committed], ends
