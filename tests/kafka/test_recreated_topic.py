"""A topic recreated under a partition whose fetch never goes back (docs/chaos.md, "The topic
rewind").

keyshared/kafka/rewinds.py starts a partition again when its fetch goes back below what its
window took in. A partition paused by its full window fetches nothing while the topic is
deleted and created again, so nothing goes back: when its window drains it resumes at its old
position, which the new, longer log has too, and the old window's cursor is committed to the new
topic. The new log's records below that position never ran (the chaos run of plain partition
mode lost 1,291 records that way). The poll loop now watches its topics' ids, and a new id
starts every assigned partition of that topic again from the new log's start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import REGISTRY

import keyshared
from keyshared.dev.topics import create_topic, delete_topics
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder, StartConsumer, consumers_for
from tests.kafka.support.journal import produce

WAIT_S = 30.0
_KEYS = 10
_OLD_SEQS = range(1, 5)  # the old log: offsets 0-39
_NEW_SEQS = range(100, 110)  # the new log: offsets 0-99, past the old log's end
_BLOCKED_FROM = 20  # the old log's records from here on hold its window (and the partition paused)


@pytest.fixture
def start_plain(kafka_bootstrap: str, new_topic: object) -> Iterator[StartConsumer]:
    """Consumers stopped after the test, before ``new_topic`` deletes their topics."""
    yield from consumers_for(kafka_bootstrap)


def _records(seqs: range) -> list[tuple[bytes | None, int]]:
    return [(f"k{k}".encode(), seq) for seq in seqs for k in range(_KEYS)]


def _recreate(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` and create it again under the same name (a new topic id)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    delete_topics(admin, [topic])
    deadline = time.monotonic() + WAIT_S * 2
    while True:
        try:
            create_topic(admin, topic, 1)
            return
        except KafkaException:
            # The deletion is still under way (TOPIC_ALREADY_EXISTS / marked for deletion).
            assert time.monotonic() < deadline, f"{topic} could not be created again"
            time.sleep(0.2)


def _committed(bootstrap: str, group: str, topic: str) -> int:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (found,) = reader.committed([TopicPartition(topic, 0)], timeout=10)
        return int(found.offset)
    finally:
        reader.close()


class _HeldOldLog:
    """The old log, produced, and a handler that holds its records from offset 20 on until
    :attr:`release` is set: with a window of 5 they fill it, and the partition stays paused
    while the topic is deleted and created again."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        produce(bootstrap, topic, _records(_OLD_SEQS))
        self.release = threading.Event()
        self._blocked = threading.Event()
        self._bootstrap, self._topic, self._group = bootstrap, topic, group

    def work(self, record: keyshared.Record) -> None:
        if int(record.value) in _OLD_SEQS and record.offset >= _BLOCKED_FROM:
            self._blocked.set()
            self.release.wait(WAIT_S * 2)

    def wait_held(self) -> None:
        """Until a held record runs, the cursor below it (20) is committed, and the member
        reports the partition paused (its window full: ``keyshared_partition_paused``)."""
        wait_until(self._blocked.is_set, "the old log's record at offset 20 to run", WAIT_S)
        wait_until(
            lambda: _committed(self._bootstrap, self._group, self._topic) == _BLOCKED_FROM,
            "the old log's cursor (20) to be committed",
            WAIT_S,
        )
        wait_until(self._paused, "the member to pause the partition", WAIT_S)

    def _paused(self) -> bool:
        for family in REGISTRY.collect():
            if family.name == "keyshared_partition_paused":
                return any(
                    sample.labels.get("group") == self._group
                    and sample.labels.get("topic") == self._topic
                    and sample.value == 1.0
                    for sample in family.samples
                )
        return False


class _RecreationSeen(logging.Handler):
    """Set once a member logs that ``topic`` was recreated (:meth:`Rewinds.recreated`):
    the event the test awaits instead of a guess at how long the member takes to see it."""

    def __init__(self, topic: str) -> None:
        super().__init__(logging.WARNING)
        self.event = threading.Event()
        self._topic = topic
        self._logger = logging.getLogger("keyshared.kafka.rewinds")

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self._topic in message and "the topic was recreated" in message:
            self.event.set()

    def __enter__(self) -> _RecreationSeen:
        self._logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)


def test_a_paused_partition_of_a_recreated_topic_is_read_again_from_the_new_logs_start(
    start_plain: StartConsumer, new_topic: object, new_group: object, kafka_bootstrap: str
) -> None:
    """Before: the partition resumed at its old position in the new log, the old window's
    cursor was committed to the new topic, and the new log's records below it never ran
    (40 of 100)."""
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("pm-recreated-paused")  # type: ignore[operator]
    check_a_paused_partition_of_a_recreated_topic(start_plain, kafka_bootstrap, topic, group)


def check_a_paused_partition_of_a_recreated_topic(
    start: StartConsumer, kafka_bootstrap: str, topic: str, group: str, **options: object
) -> None:
    """The body of the test, for every mode whose cursors are Kafka's committed offsets:
    ``start(group, topic, handler, **options)`` starts a member (a one-partition ``topic``)."""
    held = _HeldOldLog(kafka_bootstrap, topic, group)
    journal = Recorder(held.work, pid=1)
    seen = _RecreationSeen(topic)
    start(group, topic, journal, max_window=5, drain_timeout=WAIT_S, **options)
    held.wait_held()

    with seen:
        _recreate(kafka_bootstrap, topic)
        produce(kafka_bootstrap, topic, _records(_NEW_SEQS))
        # The recreation seen while the old window still holds the partition (the topic
        # ids are described every 5 s, and at once after an unknown-topic error).
        wait_until(seen.event.is_set, "the member to see the topic recreated", WAIT_S)
    held.release.set()

    def new_log_done() -> set[tuple[bytes, int]]:
        return {(e.key, e.seq) for e in journal.snapshot() if e.kind == "E" and e.seq in _NEW_SEQS}

    wanted = {(key, seq) for key, seq in _records(_NEW_SEQS) if key is not None}
    deadline = time.monotonic() + WAIT_S
    while new_log_done() != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
    missing = sorted(wanted - new_log_done(), key=lambda ks: (ks[1], ks[0]))
    assert not missing, (
        f"{len(missing)} of the new log's {len(wanted)} records never ran (first: "
        f"{missing[:3]}); the group's offset on the new topic: "
        f"{_committed(kafka_bootstrap, group, topic)}"
    )


def test_a_cursor_committed_for_the_deleted_topic_is_not_where_the_next_owner_starts(
    start_plain: StartConsumer,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A member that has not yet seen the topic's new id commits its old window's cursor
    (20) onto the recreated topic as it stops; the next owner must not start the new log
    there. Its watch is frozen here (the seconds before a description names the new id).
    Before the incarnation stamp the next owner started at 20: 20 of the new log's 100
    records never ran."""
    from keyshared.kafka.topic_ids import TopicIds

    monkeypatch.setattr(TopicIds, "changed", lambda _self: None)
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("pm-recreated-handover")  # type: ignore[operator]
    held = _HeldOldLog(kafka_bootstrap, topic, group)
    old_owner = Recorder(held.work, pid=1)
    first = start_plain(group, topic, old_owner, max_window=5, drain_timeout=1.0)
    held.wait_held()
    _recreate(kafka_bootstrap, topic)  # the group's offset goes with the topic
    produce(kafka_bootstrap, topic, _records(_NEW_SEQS))
    stopping = threading.Thread(target=first.stop, name="stop-first")
    stopping.start()
    wait_until(
        lambda: _committed(kafka_bootstrap, group, topic) == _BLOCKED_FROM,
        "the stopping member to commit its old cursor onto the new topic",
        WAIT_S,
    )
    held.release.set()  # its blocked calls end; they were given up at the drain timeout
    stopping.join(WAIT_S)

    journal = Recorder(lambda _record: None, pid=2)
    start_plain(group, topic, journal)
    wanted = {(key, seq) for key, seq in _records(_NEW_SEQS) if key is not None}

    def new_log_done() -> set[tuple[bytes, int]]:
        # The old owner may have read the new log too (the deletion rebalances the group).
        events = [*old_owner.snapshot(), *journal.snapshot()]
        return {(e.key, e.seq) for e in events if e.kind == "E" and e.seq in _NEW_SEQS}

    deadline = time.monotonic() + WAIT_S
    while new_log_done() != wanted and time.monotonic() < deadline:
        time.sleep(0.2)  # polling the journals: they have no notification
    missing = sorted(wanted - new_log_done(), key=lambda ks: (ks[1], ks[0]))
    assert not missing, (
        f"{len(missing)} of the new log's {len(wanted)} records never ran (first: "
        f"{missing[:3]}); the group's offset on the new topic: "
        f"{_committed(kafka_bootstrap, group, topic)}"
    )
