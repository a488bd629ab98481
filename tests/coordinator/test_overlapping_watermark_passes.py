"""Two members' low-watermark passes committing at once, against real servers.

Finding 31 (docs/chaos.md): in a rolling restart a leaving member's final pass and the leader's
pass both read Kafka holding the same offset. The leaving member named and committed its low
watermark; the leader then named a higher one beside its stale read, which dropped the leaving
member's offset from the record while Kafka held it. The next member to read took the group's
own commit for an operator's reset while stopped: every cursor of the partition stopped
counting (its epoch went 0 -> 1, and 1 -> 2 when the leader's commit landed), the leader
collected them as "another topic incarnation", and the group replayed from Kafka's offsets.

The test drives the same interleaving with events: the leader's pass is held after its read of
Kafka, the leaving member's pass runs whole, and the leader's commit is held between its naming
and its landing, where a third member reads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition
from kazoo.client import KazooClient

from coordinator.cursors import Cursor, read_cursors
from coordinator.incarnations import Incarnation, StaleRead, TopicRecord, TopicRecords
from coordinator.layout import GroupLayout
from keyshared.core.slots import MAX_SLOT, SlotRange
from keyshared.core.types import TP
from keyshared.modes import topic_watch
from keyshared.modes.topic_watch import TopicWatch
from keyshared.modes.watermark_pass import LowWatermarkPass
from tests.coordinator.conftest import WAIT_S, ClientFactory
from tests.kafka.support.journal import produce, wait_for

pytestmark = pytest.mark.integration

EVERY_SLOT = SlotRange(0, MAX_SLOT)


def _watch(client: KazooClient, layout: GroupLayout, bootstrap: str, topic: str) -> TopicWatch:
    watch = TopicWatch(client, layout, {"bootstrap.servers": bootstrap}, [topic], WAIT_S)
    watch.describe()
    return watch


def _write_cursor(client: KazooClient, layout: GroupLayout, watch: TopicWatch, offset: int) -> None:
    """The group's only range, all slots, done below ``offset`` (stamped as a member would)."""
    ((topic, (topic_id, _)),) = watch.described.items()
    epoch = watch.records[topic].epochs.get(0, 0) if topic in watch.records else 0
    cursor = Cursor(EVERY_SLOT, topic, 0, offset, incarnation=Incarnation(topic_id, epoch))
    path = layout.cursor(EVERY_SLOT, topic, 0)
    if client.exists(path):
        client.set(path, cursor.to_json())
    else:
        client.create(path, cursor.to_json(), makepath=True)


def _kafka_reader(bootstrap: str, group: str, topic: str) -> Callable[[], dict[TP, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})

    def read() -> dict[TP, int]:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=WAIT_S)
        return {(topic, 0): tp.offset if tp.offset >= 0 else -1}

    return read


def test_a_leaving_members_commit_beside_the_leaders_is_never_taken_for_a_reset(
    kafka_bootstrap: str,
    new_topic: Callable[..., str],
    zk_client: ClientFactory,
    layout: GroupLayout,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(f"k{i}".encode(), i) for i in range(100)])
    config = {"bootstrap.servers": kafka_bootstrap, "group.id": layout.group}
    admin = zk_client()
    for name in ("leader", "leaving"):  # neither is the last member: no settling at once
        admin.create(f"{layout.members}/{name}", b"", ephemeral=True)

    leader_client, leaving_client, reader_client = zk_client(), zk_client(), zk_client()
    leader_watch = _watch(leader_client, layout, kafka_bootstrap, topic)
    leader = LowWatermarkPass(leader_watch, leader_client, layout, config)
    leaving = LowWatermarkPass(
        _watch(leaving_client, layout, kafka_bootstrap, topic), leaving_client, layout, config
    )
    reader = _watch(reader_client, layout, kafka_bootstrap, topic)
    kafka_now = _kafka_reader(kafka_bootstrap, layout.group, topic)

    # The group has run a while: its cursor at 10, which the leader committed.
    _write_cursor(admin, layout, leader_watch, 10)
    # A fresh broker may not have the group's coordinator yet (NOT_COORDINATOR): passes fail
    # until it has, as they would in a member.
    wait_for(leader.run, WAIT_S, "the leader's first pass")
    assert kafka_now() == {(topic, 0): 10}

    # The leader's next pass reads Kafka (10), then waits.
    read_done, go_on, named, land = (threading.Event() for _ in range(4))
    real_committed, real_commit = leader._committed, leader._commit

    def committed_then_wait() -> dict[TP, int]:
        offsets = real_committed()
        read_done.set()
        assert go_on.wait(WAIT_S)
        return offsets

    def commit_when_told(offsets: list[TopicPartition]) -> None:
        named.set()
        assert land.wait(WAIT_S)
        real_commit(offsets)

    leader._committed = committed_then_wait  # type: ignore[method-assign]
    leader._commit = commit_when_told  # type: ignore[method-assign]
    _write_cursor(admin, layout, leader_watch, 30)
    outcome: list[bool] = []
    thread = threading.Thread(target=lambda: outcome.append(leader.run()))
    thread.start()
    assert read_done.wait(WAIT_S)

    # A member leaves: its final pass reads Kafka (10 still), names 30 and commits it.
    caplog.set_level(logging.WARNING)
    assert leaving.run(leaving=True)
    assert kafka_now() == {(topic, 0): 30}

    # The cursors move on; the leader names 50 beside its stale read of 10, and waits.
    _write_cursor(admin, layout, leader_watch, 50)
    go_on.set()
    assert named.wait(WAIT_S)
    _, records = reader.reconciled(kafka_now)  # Kafka holds 30, the leaving member's commit
    assert records[topic].epochs.get(0, 0) == 0, records[topic]
    assert 30 in records[topic].committed[0] and 50 in records[topic].committed[0]

    land.set()
    thread.join(WAIT_S)
    assert outcome == [True]
    assert kafka_now() == {(topic, 0): 50}
    _, records = reader.reconciled(kafka_now)
    assert records[topic].epochs.get(0, 0) == 0, records[topic]

    resets = [r.getMessage() for r in caplog.records if "reset while stopped" in r.getMessage()]
    assert resets == []
    valid, stale = reader.split(read_cursors(admin, layout), records)
    assert stale == [] and [c.offset for c in valid] == [50]


def test_a_change_found_on_a_stale_read_of_kafka_is_never_stored(
    zk_client: ClientFactory, layout: GroupLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member that read Kafka, then stalled, may find the offset it read no longer named:
    another member committed since and the record forgot it. Stored, its "reset" would drop
    every cursor of the partition; it redoes the read instead, and gives up (for its caller to
    retry) when every read is that slow. Before, the reset was stored first and the read's
    age looked at after."""
    monkeypatch.setattr(topic_watch, "_STALE_READ_S", 0.2)
    client = zk_client()
    watch = TopicWatch(client, layout, {"bootstrap.servers": "127.0.0.1:9"}, ["t"], 1.0)
    watch.described = {"t": ("id", 1)}  # what describing the topic would say
    watch.reconciled(lambda: {("t", 0): 10})  # the record: Kafka held 10
    reads: list[int] = []

    def slow_read() -> dict[TP, int]:
        reads.append(1)
        offsets = {("t", 0): 7}  # not the group's: a reset, if the read were fresh
        stalled = threading.Event()
        stalled.wait(0.3)  # the read outlives _STALE_READ_S (the stall is the fault injected)
        return offsets

    with pytest.raises(StaleRead):
        watch.reconciled(slow_read)
    assert len(reads) == 3
    record = TopicRecords(client, layout).read("t")
    assert record is not None and record.epochs == {} and record.committed == {0: (10,)}
    # A fresh read of the same offset is a reset, and is stored.
    _, records = watch.reconciled(lambda: {("t", 0): 7})
    assert records["t"].epochs == {0: 1}


def test_a_partition_whose_offset_kafka_expired_starts_at_the_lowest_offset_the_group_named() -> (
    None
):
    """Kafka expired the group's offset (-1); the record names a first commit that never
    landed (-1) beside later low watermarks: every record below the lowest of those is done,
    so the partition starts there, not at ``auto.offset.reset`` (``latest`` would skip)."""
    watch = TopicWatch(None, GroupLayout("g"), {"bootstrap.servers": "127.0.0.1:9"}, ["t"], 1.0)  # type: ignore[arg-type]
    watch.records = {"t": TopicRecord("id", committed={0: (50, 40, -1)})}
    assert watch.bases(None, {("t", 0): -1}, "latest") == {("t", 0): 40}  # type: ignore[arg-type]
