"""Kafka's expiry of a running group's offsets (``key_shared``, ``exclusive``).

Members only ``assign()``, so Kafka sees a group without members and expires each of its
offsets ``offsets.retention.minutes`` after its commit, even while the group runs. So both
modes commit unchanged offsets again within a quarter of the retention
(keyshared/kafka/offset_retention.py). Before, ``key_shared``'s low-watermark pass committed a
quiet partition's offset once, then hourly; once Kafka expired it, the next pass read the
missing offset as a reset of a stopped group, dropped every cursor of the partition, and the
next re-read (any plan change) replayed it from its start. An expiry the refresh misses (Kafka
away for longer than the retention) still must not read as a reset.

The broker here keeps offsets for one minute and looks every two seconds, so an expiry would
happen within a test; the tests' own broker keeps them for a week. Both modes' groups are set
up by one module fixture (``_quiet``) and wait out the retention together, each sampling its own
offset all along: one minute and ten seconds of CI instead of two. Each test then asserts its
group's samples and goes on alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from coordinator import ZooKeeperCoordinator
from coordinator.layout import GroupLayout
from keyshared.dev import LocalCluster
from keyshared.dev.topics import create_topic, unique_name
from keyshared.kafka.offset_retention import read_retention_minutes, refresh_interval
from keyshared.modes.topic_watch import TopicWatch
from tests.coordinator.conftest import NAMESPACE, WAIT_S, ClientFactory, expire_session
from tests.coordinator.members import StartMember, members_for
from tests.kafka.support.inprocess import Recorder, Running
from tests.kafka.support.journal import committed, wait_for

pytestmark = pytest.mark.integration

RETENTION_S = 60.0


@pytest.fixture(scope="module")
def _expiring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A broker that expires committed offsets a minute after their commit, and a ZooKeeper."""
    cluster = LocalCluster(
        Path(tmp_path_factory.mktemp("expiring-offsets")),
        kafka_heap_mb=512,
        kafka_overrides={
            "offsets.retention.minutes": str(int(RETENTION_S // 60)),
            "offsets.retention.check.interval.ms": "2000",
        },
    )
    try:
        status = cluster.up()
        assert status.kafka.address and status.zookeeper.address
        yield status.kafka.address, status.zookeeper.address
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def kafka_bootstrap(_expiring: tuple[str, str]) -> str:
    return _expiring[0]


@pytest.fixture(scope="module")
def zookeeper_hosts(_expiring: tuple[str, str]) -> str:
    return _expiring[1]


def _watch(client: KazooClient, layout: GroupLayout) -> TopicWatch:
    watch = TopicWatch(client, layout, {"bootstrap.servers": "127.0.0.1:9"}, ["t"], 1.0)
    watch.described = {"t": ("id", 2)}  # what describing the topic would say
    return watch


def test_only_a_member_live_since_kafka_held_the_offset_takes_its_absence_for_an_expiry(
    zk_client: ClientFactory, layout: GroupLayout, zookeeper_hosts: str
) -> None:
    client = zk_client()
    watch = _watch(client, layout)
    watch.reconciled(lambda: {("t", 0): 10, ("t", 1): 5})  # the group's own offsets, seen
    _, records = watch.reconciled(lambda: {("t", 0): -1, ("t", 1): 5})
    assert records["t"].epochs == {}, "expired under a live member: the cursors still count"
    watch.records = records  # as read() keeps them: slots without a cursor start at 10
    assert watch.bases(None, {("t", 0): -1}, "earliest") == {("t", 0): 10}  # type: ignore[arg-type]

    # A member that never saw the offset (the first one after a stop) cannot tell an expiry
    # from kafka-consumer-groups --delete-offsets: that is the reset rule of a stopped group.
    _, records = _watch(zk_client(), layout).reconciled(lambda: {("t", 0): -1, ("t", 1): 5})
    assert records["t"].epochs == {0: 1}

    # Nor can one whose session ended since it looked: the group may have stopped meanwhile.
    expire_session(client, zookeeper_hosts)
    _, records = watch.reconciled(lambda: {("t", 0): -1, ("t", 1): -1})
    assert records["t"].epochs == {0: 1, 1: 1}


def _produce(bootstrap: str, topic: str, partition: int, keys: list[bytes], seq: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key in keys:
        producer.produce(topic, key=key, value=str(seq).encode(), partition=partition)
    assert producer.flush(30) == 0


@dataclass
class _QuietGroup:
    """One group whose partition went quiet: what its test needs after the retention, and the
    group's committed offset as sampled every 2 s from its last commit on."""

    topic: str
    group: str
    keys: list[bytes]
    journals: list[Recorder]
    members: list[Running]
    offsets: list[int] = field(default_factory=list)
    quiet_until: float = 0.0  # sampled up to here: the retention plus 10 s after its commit


def _key_shared_quiet(bootstrap: str, start: StartMember) -> _QuietGroup:
    topic, group = unique_name("expiring"), unique_name("expiring")
    create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic, 1)
    keys = [f"k{i}".encode() for i in range(20)]
    for seq in range(1, 6):
        _produce(bootstrap, topic, 0, keys, seq)
    journals = [Recorder(pid=1), Recorder(pid=2), Recorder(pid=3)]
    members = [
        start(group, topic, journals[0], member="A"),
        start(group, topic, journals[1], member="B"),
    ]
    quiet = _QuietGroup(topic, group, keys, journals, members)
    wait_for(lambda: _handled(quiet) == 100, WAIT_S * 2, "the 100 records handled")
    wait_for(lambda: committed(bootstrap, group, topic)[0][0] == 100, WAIT_S, "offset 100")
    return quiet


def _exclusive_quiet(bootstrap: str, start: StartMember) -> _QuietGroup:
    topic, group = unique_name("expiring-x"), unique_name("expiring-x")
    create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic, 1)
    keys = [f"k{i}".encode() for i in range(20)]
    _produce(bootstrap, topic, 0, keys, 1)
    first, second = Recorder(pid=1), Recorder(pid=2)
    active = start(group, topic, first, member="A", mode="exclusive")
    wait_for(lambda: committed(bootstrap, group, topic)[0][0] == 20, WAIT_S * 2, "offset 20")
    return _QuietGroup(topic, group, keys, [first, second], [active])


def _handled(quiet: _QuietGroup) -> int:
    return len({(e.key, e.seq) for j in quiet.journals for e in j.events if e.kind == "E"})


@pytest.fixture(scope="module")
def _quiet(kafka_bootstrap: str, zookeeper_hosts: str) -> Iterator[dict[str, _QuietGroup]]:
    """Both modes' groups, each quiet for longer than the retention since its last commit, with
    its offset sampled every 2 s over that time; their first members keep running until the
    module ends (the tests stop what they need stopped)."""
    members = members_for(kafka_bootstrap, zookeeper_hosts)
    start = next(members)
    setups: dict[str, Callable[[str, StartMember], _QuietGroup]] = {
        "key_shared": _key_shared_quiet,
        "exclusive": _exclusive_quiet,
    }
    groups: dict[str, _QuietGroup] = {}
    try:
        for mode, setup in setups.items():
            groups[mode] = setup(kafka_bootstrap, start)
            groups[mode].quiet_until = time.monotonic() + RETENTION_S + 10
        while any(time.monotonic() < quiet.quiet_until for quiet in groups.values()):
            for quiet in groups.values():
                if time.monotonic() < quiet.quiet_until:
                    offset = committed(kafka_bootstrap, quiet.group, quiet.topic)[0][0]
                    quiet.offsets.append(offset)
            time.sleep(2.0)  # sampling the broker's state over the retention, not awaiting an event
        yield groups
    finally:
        next(members, None)  # stops every member started here


def test_a_quiet_partition_is_not_replayed_after_kafka_expired_its_offset(
    _quiet: dict[str, _QuietGroup],
    start: StartMember,
    kafka_bootstrap: str,
    zookeeper_hosts: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    quiet = _quiet["key_shared"]
    topic, group, keys, journals = quiet.topic, quiet.group, quiet.keys, quiet.journals

    # The partition stayed quiet for longer than the retention: the leader's pass commits the
    # unchanged offset again within it (before: once, then Kafka expired it a minute later).
    quiet.offsets.append(committed(kafka_bootstrap, group, topic)[0][0])  # and still, now
    for offset in quiet.offsets:
        assert offset == 100, f"Kafka expired the offset of a running key_shared group ({offset})"

    # An expiry the refresh missed (Kafka away past the retention) looks to the group exactly
    # like deleting it (allowed: Kafka sees no members): every offset gone, as when they all
    # expire. The leader's pass (every 5 s) finds it gone.
    caplog.set_level(logging.WARNING, logger="keyshared.modes.topic_watch")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_consumer_groups([group], request_timeout=WAIT_S)[group].result(WAIT_S)

    def expiry_seen() -> bool:  # this group's: the exclusive test's member runs meanwhile
        return any(
            group in m and ("partition(s) [0]" in m or "partition 0:" in m) for m in caplog.messages
        )

    wait_for(expiry_seen, WAIT_S, "the leader's pass to find the offset gone", 0.5)

    # A plan change: every member reads its ranges' cursors again.
    start(group, topic, journals[2], member="C")
    with ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE) as zk:
        wait_for(
            lambda: any(i.held and i.member_id == "C" for i in zk.status(group).leases),
            WAIT_S * 2,
            "C to hold its range",
        )
    _produce(kafka_bootstrap, topic, 0, keys, 6)  # after whatever a re-read replays, per key
    wait_for(lambda: _handled(quiet) == 120, WAIT_S * 2, "the 20 new records handled")
    runs = [(e.key, e.seq) for j in journals for e in j.events if e.kind == "E" and e.seq <= 5]
    again = len(runs) - len(set(runs))
    assert again == 0, f"{again} of the 100 quiet records were handled again after the expiry"
    assert not any("reset while stopped" in m for m in caplog.messages), caplog.messages
    wait_for(
        lambda: committed(kafka_bootstrap, group, topic)[0][0] == 120,
        WAIT_S,
        "the pass to commit the new offset (Kafka holds one again)",
    )


def test_the_brokers_offset_retention_is_read(kafka_bootstrap: str) -> None:
    minutes = read_retention_minutes({"bootstrap.servers": kafka_bootstrap}, 10.0)
    assert minutes == RETENTION_S / 60
    assert refresh_interval(minutes) == RETENTION_S / 4


def test_an_exclusive_groups_quiet_offsets_outlive_a_short_retention(
    _quiet: dict[str, _QuietGroup], start: StartMember, kafka_bootstrap: str
) -> None:
    """Exclusive mode's progress is the group's Kafka offsets, which Kafka expires under a
    running group (it only ``assign()``s). Before: refreshed hourly, a quiet partition's offset
    went a minute after its commit here, and the next active member read the partition again
    from its start."""
    quiet = _quiet["exclusive"]
    topic, group, keys = quiet.topic, quiet.group, quiet.keys
    second = quiet.journals[1]

    # Quiet for longer than the retention (checked every 2 s): the offset must stay.
    quiet.offsets.append(committed(kafka_bootstrap, group, topic)[0][0])  # and still, now
    for offset in quiet.offsets:
        assert offset == 20, f"Kafka expired the offset of a running exclusive group ({offset})"

    active = quiet.members[0]
    active.consumer.stop()
    active.join()
    start(group, topic, second, member="B", mode="exclusive")
    _produce(kafka_bootstrap, topic, 0, keys, 2)
    wait_for(lambda: len([e for e in second.events if e.kind == "E"]) >= 20, WAIT_S * 2,
             "the next active member to handle the 20 new records")  # fmt: skip
    again = [e for e in second.events if e.kind == "E" and e.seq == 1]
    assert not again, f"{len(again)} records handled again by the next active member"
