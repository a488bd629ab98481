"""A topic's life cycle under a running or stopped group: recreated, grown (issue 24).

- **Recreated** (defect 1): cursors in ZooKeeper belong to one incarnation of a topic (Kafka's
  topic id). A group that processed a topic which was then deleted and created again under the
  same name must read the new topic from its start, not resume at the old offsets and count
  the new records below them as done.
- **Grown** (defect 9): a ``key_shared`` member folds partitions added while it runs into what
  it reads, from their start (with ``auto.offset.reset=latest`` too: they are new to the group).

Partition mode is checked too: Kafka deletes a group's committed offsets (and their
finished-offset metadata) with the topic, so a *stopped* group was never affected. A topic
recreated under a *running* consumer stopped every mode until keyshared/kafka/rewinds.py (its
fetch went back below what the window had read); all four modes are checked there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from coordinator import ZooKeeperCoordinator
from keyshared.dev.topics import create_topic, delete_topics
from tests.coordinator.conftest import NAMESPACE, WAIT_S
from tests.coordinator.members import StartMember
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder, Running, StartConsumer, consumers_for
from tests.kafka.support.journal import check, produce
from tests.kafka.test_recreated_topic import check_a_paused_partition_of_a_recreated_topic


@pytest.fixture
def start_plain(kafka_bootstrap: str, new_topic: object) -> Iterator[StartConsumer]:
    """Consumers stopped after the test, before ``new_topic`` deletes their topics."""
    yield from consumers_for(kafka_bootstrap)


def _records(keys: int, each: int, first: int = 1) -> list[tuple[bytes | None, int]]:
    return [(f"k{k}".encode(), seq) for seq in range(first, first + each) for k in range(keys)]


def _recreate(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete ``topic`` and create it again under the same name (a new topic id)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    delete_topics(admin, [topic])
    deadline = time.monotonic() + WAIT_S * 2
    while True:
        try:
            create_topic(admin, topic, partitions)
            return
        except KafkaException:
            # The deletion is still under way (TOPIC_ALREADY_EXISTS / marked for deletion).
            assert time.monotonic() < deadline, f"{topic} could not be created again"
            time.sleep(0.2)


def _run_to(journal: Recorder, total: int, what: str) -> None:
    wait_until(lambda: journal.finished() >= total, what, WAIT_S * 2)


def _await_or_error(run: Running, condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition``; fail at once, naming the error, if the consumer stopped."""
    wait_until(lambda: condition() or run.error is not None, what, WAIT_S * 2)
    assert run.error is None, f"the consumer stopped: {run.error!r}"


def test_key_shared_reads_a_recreated_topic_from_its_start(
    start: StartMember, new_topic: object, new_group: object, kafka_bootstrap: str
) -> None:
    topic = new_topic(3)  # type: ignore[operator]
    group = new_group("ks-recreate")  # type: ignore[operator]
    produce(kafka_bootstrap, topic, _records(50, 20))
    first = Recorder(pid=1)
    run = start(group, topic, first, member="A")
    _run_to(first, 1000, "the first incarnation's 1,000 records")
    run.stop()

    _recreate(kafka_bootstrap, topic, 3)
    produce(kafka_bootstrap, topic, _records(50, 10))
    second = Recorder(pid=2)
    start(group, topic, second, member="A")
    deadline = time.monotonic() + WAIT_S * 2
    while second.finished() < 500 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert second.finished() == 500, (
        f"{second.finished()} of the recreated topic's 500 records were handled: the old "
        "incarnation's cursors counted them done"
    )
    report = check(second.snapshot(), {f"k{k}".encode(): 10 for k in range(50)})
    assert not report.missing and not report.violations, report.summary()


def test_partition_mode_reads_a_recreated_topic_from_its_start(
    start_plain: StartConsumer, new_topic: object, new_group: object, kafka_bootstrap: str
) -> None:
    """Proof that partition mode was never affected: Kafka drops the group's committed offsets
    (and their finished-offsets metadata) with the topic."""
    topic = new_topic(3)  # type: ignore[operator]
    group = new_group("pm-recreate")  # type: ignore[operator]
    produce(kafka_bootstrap, topic, _records(50, 20))
    first = Recorder(pid=1)
    run = start_plain(group, topic, first)
    _run_to(first, 1000, "the first incarnation's 1,000 records")
    run.stop()

    _recreate(kafka_bootstrap, topic, 3)
    produce(kafka_bootstrap, topic, _records(50, 10))
    second = Recorder(pid=2)
    run = start_plain(group, topic, second)
    _run_to(second, 500, "the recreated topic's 500 records")
    run.stop()  # before the topic goes: a final commit to a deleted topic is retried for 30 s
    report = check(second.snapshot(), {f"k{k}".encode(): 10 for k in range(50)})
    assert not report.missing and not report.violations, report.summary()


def test_key_shared_reads_partitions_added_while_it_runs(
    start: StartMember,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
    zookeeper_hosts: str,
) -> None:
    topic = new_topic(2)  # type: ignore[operator]
    group = new_group("ks-grow")  # type: ignore[operator]
    journals = [Recorder(pid=1), Recorder(pid=2)]
    latest = {"auto.offset.reset": "latest"}
    for name, journal in zip("AB", journals, strict=True):
        start(group, topic, journal, member=name, kafka=latest)
    with ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE) as zk:
        wait_until(
            lambda: (
                len([lease for lease in zk.range_leases(group, "obs").read() if lease.held]) == 2
            ),
            "both members to hold a range",
            WAIT_S,
        )

    def handled() -> int:
        return sum(journal.finished() for journal in journals)

    produce(kafka_bootstrap, topic, _records(40, 5))
    wait_until(lambda: handled() >= 200, "the records of the first two partitions", WAIT_S * 2)

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=WAIT_S)
    counts = produce(kafka_bootstrap, topic, _records(40, 10, first=6))
    assert counts.get(2, 0) + counts.get(3, 0) > 0, "nothing landed in the new partitions"
    deadline = time.monotonic() + WAIT_S * 2
    while handled() < 600 and time.monotonic() < deadline:
        time.sleep(0.2)
    events = journals[0].snapshot() + journals[1].snapshot()
    new = {e.offset for e in events if e.partition >= 2 and e.kind == "E"}
    assert handled() == 600, (
        f"{handled()} of 600 records handled; {len(new)} of the "
        f"{counts.get(2, 0) + counts.get(3, 0)} produced to the added partitions"
    )
    report = check(events, {f"k{k}".encode(): 15 for k in range(40)})
    assert not report.missing and not report.violations, report.summary()


@pytest.mark.parametrize("mode", ["partition", "partition_leases", "key_shared", "exclusive"])
def test_a_topic_recreated_while_it_runs_is_read_again_from_its_start(
    mode: str,
    request: pytest.FixtureRequest,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
) -> None:
    """Defect 1's live case: the fetch of a running consumer resets to the new topic's start,
    below what it read; the partition is read again from there, and none of the new
    incarnation's records counts as done unrun. Failed before keyshared/kafka/rewinds.py, in
    every mode: the window refused the offsets ("admitted out of order") and the consumer
    stopped; in key_shared its last low-watermark pass then committed the old topic's offsets
    to the new one (0 of 500 handled)."""
    topic = new_topic(3)  # type: ignore[operator]
    group = new_group(f"{mode}-recreate-live")  # type: ignore[operator]
    produce(kafka_bootstrap, topic, _records(50, 20))
    journal = Recorder(pid=1)
    if mode == "partition":
        run = request.getfixturevalue("start_plain")(group, topic, journal)
    else:  # with the coordinator
        coordinated = {"partition_leases": "partition"}.get(mode, mode)
        run = request.getfixturevalue("start")(group, topic, journal, member="A", mode=coordinated)
    _run_to(journal, 1000, "the first incarnation's 1,000 records")

    _recreate(kafka_bootstrap, topic, 3)
    produce(kafka_bootstrap, topic, _records(50, 10, first=21))
    _await_or_error(run, lambda: journal.finished() >= 1500, "the recreated topic's 500 records")
    report = check(journal.snapshot(), {f"k{k}".encode(): 30 for k in range(50)})
    assert not report.missing and not report.violations, report.summary()


@pytest.mark.parametrize("mode", ["partition_leases", "exclusive"])
def test_a_paused_partition_of_a_recreated_topic_is_read_again_from_the_new_logs_start(
    mode: str, start: StartMember, new_topic: object, new_group: object, kafka_bootstrap: str
) -> None:
    """The coordinated modes whose cursors are Kafka's committed offsets: a partition paused
    while its topic is recreated never sees its fetch go back (tests/kafka/
    test_recreated_topic.py, plain partition mode, has the story)."""
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group(f"{mode}-recreated-paused")  # type: ignore[operator]
    coordinated = {"partition_leases": "partition"}.get(mode, mode)
    check_a_paused_partition_of_a_recreated_topic(
        start, kafka_bootstrap, topic, group, member="A", mode=coordinated
    )
