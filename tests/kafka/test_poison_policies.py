"""Poison policies end to end on the real broker: what reaches the DLQ (and in which order),
where the committed offset stands, that other keys keep flowing, and what survives a restart.

Each test runs ``KeySharedConsumer`` on a thread and waits on what the consumer did (handler
calls, committed offsets, DLQ contents, metrics), never on a fixed sleep.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import REGISTRY

from keyshared import Record, RetryPolicy
from keyshared.dev.topics import GroupFactory, TopicFactory, create_topic, delete_topics
from keyshared.kafka.dlq import DlqHeader
from keyshared.kafka.keystate import KeyStateStore, topic_for
from keyshared.runtime.scheduler import Scheduler
from tests.helpers import produce as shared_produce
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Running, consumers_for

pytestmark = pytest.mark.integration

WAIT = 60.0
POISON = b"poison"
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff=0.05, jitter=0.0)


# -- harness -----------------------------------------------------------------------------------


class Handler:
    """Fails every record whose value is ``poison``; journals every call and every success."""

    def __init__(self) -> None:
        self.calls: list[tuple[bytes | None, Any, int, int, float]] = []  # key value off att t
        self.done: list[tuple[bytes | None, Any, int, float]] = []  # key value offset t
        self._cond = threading.Condition()

    def __call__(self, record: Record) -> None:
        now = time.monotonic()
        with self._cond:
            self.calls.append((record.key, record.value, record.offset, record.attempt, now))
        if record.value == POISON:
            raise ValueError(f"cannot handle offset {record.offset}")
        with self._cond:
            self.done.append((record.key, record.value, record.offset, time.monotonic()))
            self._cond.notify_all()

    def wait_done(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.done) >= count, WAIT), (
                f"{len(self.done)} of {count} records processed"
            )

    def values_of(self, key: bytes) -> list[Any]:
        with self._cond:
            return [value for k, value, _, _ in self.done if k == key]

    def attempts_of(self, offset: int) -> list[tuple[int, float]]:
        with self._cond:
            return [(attempt, t) for _, _, o, attempt, t in self.calls if o == offset]


@pytest.fixture
def start(kafka_bootstrap: str) -> Iterator[Callable[..., Running]]:
    yield from consumers_for(kafka_bootstrap, WAIT, FAST_RETRY)


@pytest.fixture
def group(new_group: GroupFactory, kafka_bootstrap: str) -> Iterator[str]:
    name = new_group("poison")
    yield name
    delete_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), [topic_for(name)])


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> list[int]:
    """Produce ``(key, value)`` records to partition 0, in order; return their offsets."""
    return shared_produce(bootstrap, topic, [(0, k, v) for k, v in records], WAIT).get(0, [])


def committed(bootstrap: str, group: str, topic: str) -> int | None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=WAIT)
        return tp.offset if tp.offset >= 0 else None
    finally:
        consumer.close()


def read_dlq(bootstrap: str, topic: str, count: int) -> list[Any]:
    """Wait for ``count`` dead letters in partition 0 of ``topic``; return exactly those."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[Any] = []
    deadline = time.monotonic() + WAIT
    try:
        while len(found) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                found.append(msg)
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), WAIT, cached=False)
    finally:
        consumer.close()
    assert len(found) == count and end == count, f"{topic}: {len(found)}/{end} of {count}"
    return found


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def blocked_keys(group: str, member: str, topic: str) -> float:
    return metric("keyshared_partition_blocked_keys", group=group, member=member, topic=topic,
                  partition="0")  # fmt: skip


def header(msg: Any, name: str) -> bytes | None:
    values = [value for key, value in msg.headers() or () if key == name]
    return values[-1] if values else None


def mixed_records(bad: bytes, bad_values: list[bytes], others: int) -> list[tuple[bytes, bytes]]:
    """The bad key's records with ``others`` records of 10 other keys interleaved after each."""
    records: list[tuple[bytes, bytes]] = []
    for i, value in enumerate(bad_values):
        records.append((bad, value))
        records += [(f"good-{n % 10}".encode(), f"{i}-{n}".encode()) for n in range(others)]
    return records


# -- drop and dead_letter ----------------------------------------------------------------------


def test_drop_counts_the_record_done_and_the_key_goes_on(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str, start: Callable[..., Running]
) -> None:
    topic = new_topic(partitions=1)
    records = mixed_records(b"bad", [b"1", POISON, b"3"], others=20)
    offsets = produce(kafka_bootstrap, topic, records)
    handler = Handler()
    run = start(group, topic, handler, poison="drop")
    handler.wait_done(len(records) - 1)
    wait_until(lambda: committed(kafka_bootstrap, group, topic) == len(records), "commit to end")
    run.stop()
    assert handler.values_of(b"bad") == [b"1", b"3"]
    poison_offset = offsets[records.index((b"bad", POISON))]
    assert [a for a, _ in handler.attempts_of(poison_offset)] == [1, 2, 3]


def test_dead_letter_writes_the_dlq_in_order_commits_past_it_and_other_keys_flow(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str, start: Callable[..., Running]
) -> None:
    topic = new_topic(partitions=1)
    create_topic(AdminClient({"bootstrap.servers": kafka_bootstrap}), f"{topic}.dlq", 1)
    records = mixed_records(b"bad", [POISON, b"2", POISON, b"4"], others=30)
    records.insert(5, (b"other-bad", POISON))
    offsets = produce(kafka_bootstrap, topic, records)
    handler = Handler()
    slow = RetryPolicy(max_attempts=3, initial_backoff=0.5, multiplier=2.0, jitter=0.0)
    run = start(group, topic, handler, poison="dead_letter", retry=slow)
    letters = read_dlq(kafka_bootstrap, f"{topic}.dlq", 3)
    wait_until(lambda: committed(kafka_bootstrap, group, topic) == len(records), "commit to end")
    run.stop()

    poison_offsets = [offsets[i] for i, (_, value) in enumerate(records) if value == POISON]
    source_offsets = [int(header(m, DlqHeader.SOURCE_OFFSET) or b"-1") for m in letters]
    assert sorted(source_offsets) == poison_offsets, "each poison record once, nothing else"
    bad_offsets = [o for m, o in zip(letters, source_offsets, strict=True) if m.key() == b"bad"]
    assert bad_offsets == [poison_offsets[0], poison_offsets[2]], "a key's dead letters in order"
    assert all(m.value() == POISON for m in letters)
    for letter in letters:
        assert header(letter, DlqHeader.SOURCE_TOPIC) == topic.encode()
        assert header(letter, DlqHeader.SOURCE_PARTITION) == b"0"
        assert header(letter, DlqHeader.GROUP) == group.encode()
        assert header(letter, DlqHeader.ATTEMPTS) == b"3"
        assert header(letter, DlqHeader.REASON) == b"exhausted"
        assert header(letter, DlqHeader.ERROR_CLASS) == b"ValueError"
        assert (header(letter, DlqHeader.ERROR_MESSAGE) or b"").startswith(b"cannot handle")
        assert b"ValueError" in (header(letter, DlqHeader.TRACEBACK) or b"")
        first = int(header(letter, DlqHeader.FIRST_FAILURE) or b"0")
        assert 0 < first <= int(header(letter, DlqHeader.LAST_FAILURE) or b"0")
    assert handler.values_of(b"bad") == [b"2", b"4"], "the key goes on after each dead letter"
    # Other keys flowed while the first poison record waited out its 1.5 s of backoff.
    last_attempt = max(t for _, t in handler.attempts_of(poison_offsets[0]))
    others = [t for key, _, _, t in handler.done if key is not None and key.startswith(b"good")]
    assert len(others) == 30 * 4 and all(t < last_attempt for t in others[:30])


# -- block and block_and_dead_letter -----------------------------------------------------------


@pytest.mark.parametrize("policy", ["block", "block_and_dead_letter"])
def test_block_holds_the_key_and_the_cursor_until_released(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str, start: Callable[..., Running],
    scheduler_release: Callable[[str, str, bytes], None], policy: str,
) -> None:  # fmt: skip
    topic = new_topic(partitions=1)
    create_topic(AdminClient({"bootstrap.servers": kafka_bootstrap}), f"{topic}.dlq", 1)
    records = mixed_records(b"bad", [b"1", POISON, b"3", b"4"], others=10)
    offsets = produce(kafka_bootstrap, topic, records)
    poison_offset = offsets[records.index((b"bad", POISON))]
    handler = Handler()
    run = start(group, topic, handler, member="first", poison=policy)
    handler.wait_done(len(records) - 3)  # everything but the blocked key's last three
    wait_until(lambda: committed(kafka_bootstrap, group, topic) == poison_offset, "cursor held")
    assert handler.values_of(b"bad") == [b"1"], "nothing of a blocked key runs"
    if policy == "block_and_dead_letter":
        [letter] = read_dlq(kafka_bootstrap, f"{topic}.dlq", 1)
        assert int(header(letter, DlqHeader.SOURCE_OFFSET) or b"-1") == poison_offset

    # A restart while blocked redoes neither the finished records above the cursor...
    run.stop()
    assert committed(kafka_bootstrap, group, topic) == poison_offset
    finished_before = len(handler.done)
    run = start(group, topic, handler, member="second", poison=policy)
    wait_until(lambda: blocked_keys(group, "second", topic) == 1, "the key blocked again")
    assert len(handler.attempts_of(poison_offset)) == 6
    # ...nor lets the key pass: it blocks again. The operator then releases it from outside.
    scheduler_release(group, topic, b"bad")
    handler.wait_done(len(records) - 1)
    wait_until(lambda: committed(kafka_bootstrap, group, topic) == len(records), "commit to end")
    run.stop()
    assert handler.values_of(b"bad") == [b"1", b"3", b"4"]
    assert len(handler.done) == finished_before + 2, "no finished record was processed twice"
    if policy == "block_and_dead_letter":
        # The redelivered record was dead-lettered again: at-least-once, never lost.
        assert len(read_dlq(kafka_bootstrap, f"{topic}.dlq", 2)) == 2


@pytest.fixture
def scheduler_release(kafka_bootstrap: str) -> Iterator[Callable[[str, str, bytes], None]]:
    """Release a key the way ``keyshared release`` does: a tombstone from another process."""
    scheduler = Scheduler()

    def release(group: str, topic: str, key: bytes) -> None:
        config = {"bootstrap.servers": kafka_bootstrap}
        store = KeyStateStore(config, group, lambda *_: None, scheduler.call_later)
        try:
            store.start(create=False)

            def recorded() -> bool:
                store.sync(WAIT)
                return store.get(topic, 0, key) is not None

            wait_until(recorded, "the key to be recorded as blocked")
            store.release(topic, 0, key)
        finally:
            store.close()

    yield release
    scheduler.close()


# -- park ----------------------------------------------------------------------------------------


def test_park_sends_the_keys_tail_to_the_dlq_in_order_survives_restart_and_releases(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str, start: Callable[..., Running]
) -> None:
    topic = new_topic(partitions=1)
    create_topic(AdminClient({"bootstrap.servers": kafka_bootstrap}), f"{topic}.dlq", 1)
    records = mixed_records(b"bad", [b"1", POISON, b"3", b"4"], others=10)
    offsets = produce(kafka_bootstrap, topic, records)
    handler = Handler()
    run = start(group, topic, handler, poison="park")
    read_dlq(kafka_bootstrap, f"{topic}.dlq", 3)
    wait_until(lambda: committed(kafka_bootstrap, group, topic) == len(records), "commit to end")
    assert handler.values_of(b"bad") == [b"1"]
    assert len(handler.done) == len(records) - 3, "every other key was processed"
    run.stop()

    # Restart: the key is still parked, so its next record follows the others into the DLQ.
    more = [(b"bad", b"5"), (b"good-0", b"late")]
    offsets += produce(kafka_bootstrap, topic, more)
    run = start(group, topic, handler, poison="park")
    letters = read_dlq(kafka_bootstrap, f"{topic}.dlq", 4)
    wait_until(lambda: committed(kafka_bootstrap, group, topic) == offsets[-1] + 1, "commit")
    assert handler.values_of(b"bad") == [b"1"]
    assert handler.values_of(b"good-0")[-1] == b"late"

    assert [m.value() for m in letters] == [POISON, b"3", b"4", b"5"]
    assert [header(m, DlqHeader.REASON) for m in letters] == [b"exhausted"] + [b"parked"] * 3
    bad_offsets = [offsets[i] for i, (key, _) in enumerate(records + more) if key == b"bad"]
    assert [int(header(m, DlqHeader.SOURCE_OFFSET) or b"-1") for m in letters] == bad_offsets[1:]

    # Released: the key's next record is processed again, nothing more goes to the DLQ.
    assert run.consumer.release(topic, 0, b"bad") == "parked"
    produce(kafka_bootstrap, topic, [(b"bad", b"6")])
    wait_until(lambda: handler.values_of(b"bad") == [b"1", b"6"], "the released key to resume")
    run.stop()
    read_dlq(kafka_bootstrap, f"{topic}.dlq", 4)


# -- the DLQ is unavailable ----------------------------------------------------------------------


def test_missing_dlq_holds_the_cursor_reports_and_recovers_with_nothing_lost(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str, start: Callable[..., Running],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    topic = new_topic(partitions=1)
    dlq = f"{topic}.dlq"
    records = [(b"first", b"x"), *mixed_records(b"bad", [POISON, b"2"], others=20)]
    offsets = produce(kafka_bootstrap, topic, records)
    poison_offset = offsets[1]
    handler = Handler()
    caplog.set_level(logging.ERROR, logger="keyshared.kafka.dlq")
    run = start(group, topic, handler, member="holder", poison="dead_letter")

    def failures() -> float:
        return metric("keyshared_dlq_write_failures_total", group=group, member="holder",
                      dlq_topic=dlq)  # fmt: skip

    handler.wait_done(len(records) - 2)  # all but the poison record and its key's next one
    wait_until(lambda: committed(kafka_bootstrap, group, topic) == poison_offset, "cursor held")
    seen = failures()
    wait_until(lambda: failures() >= max(seen, 1) + 1, "another failed DLQ write")
    assert committed(kafka_bootstrap, group, topic) == poison_offset, "the cursor must not move"
    assert handler.values_of(b"bad") == [], "the key waits for its dead letter"
    assert any(
        f"{topic}[0]@{poison_offset}" in r.getMessage() and repr(dlq) in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR
    ), "an error log names the record and the DLQ topic"

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    create_topic(admin, dlq, 1)
    try:
        [letter] = read_dlq(kafka_bootstrap, dlq, 1)
        assert int(header(letter, DlqHeader.SOURCE_OFFSET) or b"-1") == poison_offset
        wait_until(lambda: committed(kafka_bootstrap, group, topic) == len(records), "commit")
        assert handler.values_of(b"bad") == [b"2"]
        done_offsets = sorted(offset for _, _, offset, _ in handler.done)
        assert done_offsets == [o for o in offsets if o != poison_offset], "nothing lost or redone"
        assert metric("keyshared_dlq_writes_total", group=group, member="holder",
                      dlq_topic=dlq) == 1  # fmt: skip
    finally:
        run.stop()
        delete_topics(admin, [dlq])


# -- retry timing and bad input ------------------------------------------------------------------


@pytest.mark.parametrize("jitter", [0.0, 0.5])
def test_retry_backoff_grows_and_is_capped(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str, start: Callable[..., Running],
    jitter: float,
) -> None:  # fmt: skip
    topic = new_topic(partitions=1)
    records = [(b"bad", POISON), (b"bad", b"after"), (b"good", b"1")]
    offsets = produce(kafka_bootstrap, topic, records)
    retry = RetryPolicy(max_attempts=6, initial_backoff=0.1, multiplier=2.0, max_backoff=0.4,
                        jitter=jitter)  # fmt: skip
    handler = Handler()
    run = start(group, topic, handler, poison="drop", retry=retry)
    handler.wait_done(2)
    wait_until(lambda: handler.values_of(b"bad") == [b"after"], "the key to go on")
    run.stop()

    attempts = handler.attempts_of(offsets[0])
    assert [a for a, _ in attempts] == [1, 2, 3, 4, 5, 6], "Record.attempt counts the tries"
    gaps = [later - earlier for (_, earlier), (_, later) in itertools.pairwise(attempts)]
    for gap, nominal in zip(gaps, [0.1, 0.2, 0.4, 0.4, 0.4], strict=True):
        low = nominal * (1 - jitter) - 0.01  # the timer never fires early
        high = min(nominal * (1 + jitter), 0.4) + 0.25  # scheduling slack, never past the cap
        assert low <= gap <= high, f"gaps {gaps}"
    if jitter == 0.0:
        assert gaps[1] > gaps[0] * 1.5 and gaps[2] > gaps[1] * 1.5, f"growth: {gaps}"
        assert max(gaps[2:]) < 0.4 + 0.25, f"cap: {gaps}"


def test_undeserializable_record_goes_to_the_dlq_without_retries(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str, start: Callable[..., Running]
) -> None:
    topic = new_topic(partitions=1)
    create_topic(AdminClient({"bootstrap.servers": kafka_bootstrap}), f"{topic}.dlq", 1)
    offsets = produce(kafka_bootstrap, topic, [(b"k", b"1"), (b"k", b"\xff"), (b"k", b"3")])

    def decode(value: bytes | None) -> str:
        return (value or b"").decode("utf-8")

    handler = Handler()
    run = start(group, topic, handler, poison="dead_letter", value_deserializer=decode)
    [letter] = read_dlq(kafka_bootstrap, f"{topic}.dlq", 1)
    handler.wait_done(2)
    run.stop()
    assert [value for _, value, _, _ in handler.done] == ["1", "3"]
    assert handler.attempts_of(offsets[1]) == [], "the handler never sees it"
    assert letter.value() == b"\xff", "the raw bytes are kept"
    assert header(letter, DlqHeader.REASON) == b"deserialization"
    assert header(letter, DlqHeader.ATTEMPTS) == b"1"
