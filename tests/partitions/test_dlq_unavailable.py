"""A ``key_shared`` member whose dead-letter writes fail: nothing lost, the cursor waits, then
recovers.

A fault of one path only: the members read their topic and reach ZooKeeper, but the DLQ topic
does not exist (auto-creation is off), so every write of a dead letter fails and is retried.
Partition mode's Kafka commit was proved so in ``tests/kafka/test_poison_policies.py``, and a
write abandoned by a revoke in ``tests/coordinator/test_abandoned_writes.py``; here the cursor
is the range's cursor in ZooKeeper, with two members splitting the slots. Until the topic is
created, the poison record's range cursor stays at its offset while every other key flows,
and the poison key's next record waits; once created, the dead letter is written (once), the
key goes on and the cursor passes the record.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient
from prometheus_client import REGISTRY

from coordinator.cursors import read_cursors
from coordinator.layout import GroupLayout
from keyshared.core.slots import slot_of
from keyshared.dev.topics import create_topic, delete_topics, unique_name
from tests.coordinator.conftest import NAMESPACE
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.journal import Event, check, produce
from tests.partitions.conftest import Partitioned, StartMember

pytestmark = pytest.mark.integration

KEYS = [f"key-{i}".encode() for i in range(20)]
BAD = b"bad"


def _fail_first_of_bad(record: object) -> None:
    if record.raw_key == BAD and record.value == b"1":  # type: ignore[attr-defined]
        raise ValueError("poison")


class Journal:
    """Both members' handler journals (one ``Recorder`` each, so overlaps between them show)."""

    def __init__(self) -> None:
        self.members = [Recorder(_fail_first_of_bad, pid=1), Recorder(_fail_first_of_bad, pid=2)]

    def events(self) -> list[Event]:
        return [e for r in self.members for e in r.snapshot()]

    def times(self, kind: str, key: bytes, seq: int) -> list[int]:
        return [e.t for e in self.events() if e.kind == kind and e.key == key and e.seq == seq]


def _dlq_end(bootstrap: str, dlq: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("dlq-reader")})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(dlq, 0), 10, cached=False)
        return int(end)
    finally:
        consumer.close()


def test_failing_dead_letter_writes_hold_the_range_cursor_lose_nothing_and_recover(
    servers: Partitioned, topic: object, start: StartMember, observer: KazooClient
) -> None:
    name = topic(1)  # type: ignore[operator]
    dlq = f"{name}.dlq"
    group = unique_name("dlq-missing")
    journal = Journal()
    options = {"poison": "dead_letter", "dlq_topic": dlq}
    start(group, name, journal.members[0], "a", **options)
    start(group, name, journal.members[1], "b", **options)
    records = [(k, 1) for k in KEYS] + [(BAD, 1), (BAD, 2)] + [(k, 2) for k in KEYS]
    poison_offset = len(KEYS)  # one fresh partition: offsets follow the produce order
    produce(servers.bootstrap, name, records)

    def failures() -> float:
        return sum(
            REGISTRY.get_sample_value(
                "keyshared_dlq_write_failures_total",
                {"group": group, "member": member, "dlq_topic": dlq},
            )
            or 0.0
            for member in ("a", "b")
        )

    def cursor_of_bad() -> int:
        with_slot = [
            c.offset
            for c in read_cursors(observer, GroupLayout(group, NAMESPACE))
            if c.topic == name and c.slots.lo <= slot_of(BAD) <= c.slots.hi
        ]
        return max(with_slot, default=-1)

    wait_until(lambda: all(journal.times("E", k, 2) for k in KEYS), "every other key flowing")
    wait_until(lambda: failures() >= 2, "two failed writes of the dead letter")
    assert not journal.times("S", BAD, 2), "the poison key's next record waits"
    wait_until(lambda: cursor_of_bad() >= 0, "the poison range's cursor written")
    assert cursor_of_bad() <= poison_offset, "the cursor never passes an unwritten letter"

    created = time.monotonic_ns()
    admin = AdminClient({"bootstrap.servers": servers.bootstrap})
    create_topic(admin, dlq, 1)
    try:
        wait_until(lambda: bool(journal.times("E", BAD, 2)), "the poison key to go on")
        wait_until(lambda: cursor_of_bad() > poison_offset, "the cursor past the letter")
        assert _dlq_end(servers.bootstrap, dlq) == 1, "one dead letter, written once"
    finally:
        delete_topics(admin, [dlq])
    assert min(journal.times("S", BAD, 2)) > created
    report = check(journal.events(), {**dict.fromkeys(KEYS, 2), BAD: 2})
    assert not report.missing and not report.violations, report.summary()
