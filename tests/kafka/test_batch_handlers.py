"""Batch handlers (``batch_size=``): lists of records, per-key order, partial failure, linger."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict

from confluent_kafka.admin import AdminClient

import keyshared
from keyshared.dev.topics import create_topic
from keyshared.kafka.dlq import DlqHeader
from tests.kafka.support.inprocess import running
from tests.kafka.support.journal import produce, sequenced, wait_committed_to_end, wait_for
from tests.kafka.test_poison_policies import header, read_dlq

FAST_RETRY = keyshared.RetryPolicy(max_attempts=3, initial_backoff=0.05, jitter=0.0)
WAIT = 60.0


class Batches:
    """Every batch a handler received, as ``(key, seq, attempt)`` lists, thread-safe."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[bytes, int, int]]] = []
        self.lock = threading.Lock()

    def note(self, batch: list[keyshared.Record]) -> None:
        assert isinstance(batch, list) and batch, f"not a non-empty list: {batch!r}"
        with self.lock:
            self.calls.append([(r.key, int(r.value), r.attempt) for r in batch])

    def handled(self) -> list[tuple[bytes, int, int]]:
        with self.lock:
            return [item for call in self.calls for item in call]

    def count(self) -> int:
        return len(self.handled())


def _config(bootstrap: str, group: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, "group.id": group}


def _assert_in_order_once(handled: list[tuple[bytes, int, int]], per_key: int) -> None:
    by_key: dict[bytes, list[int]] = defaultdict(list)
    for key, seq, _ in handled:
        by_key[key].append(seq)
    for key, seqs in by_key.items():
        assert seqs == list(range(1, per_key + 1)), f"{key!r} handled as {seqs}"


def test_batches_never_hold_two_records_of_a_key_and_keep_per_key_order(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    topic, group = new_topic(partitions=2), new_group("batch")
    keys = [f"k{i:02d}".encode() for i in range(40)]
    produce(kafka_bootstrap, topic, sequenced(keys, 15))
    seen = Batches()

    def handle(batch: list[keyshared.Record]) -> None:
        seen.note(batch)
        time.sleep(0.002)  # long enough that records queue behind a running batch

    consumer = keyshared.KeySharedConsumer(
        _config(kafka_bootstrap, group), [topic], handle, workers=3, batch_size=16
    )
    with running(consumer):
        wait_for(lambda: seen.count() >= 600, WAIT, "600 records handled")
        wait_committed_to_end(kafka_bootstrap, group, topic)
    for call in seen.calls:
        assert 1 <= len(call) <= 16
        call_keys = [key for key, _, _ in call]
        assert len(set(call_keys)) == len(call_keys), f"two records of one key in {call}"
    assert max(len(call) for call in seen.calls) > 1, "every batch held one record"
    assert len(seen.calls) < 600
    _assert_in_order_once(seen.handled(), 15)


def test_batch_error_fails_only_the_named_records_each_on_its_own_policy(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    topic, group = new_topic(partitions=1), new_group("batch-error")
    create_topic(AdminClient({"bootstrap.servers": kafka_bootstrap}), f"{topic}.dlq", 1)
    keys = [b"bad", b"flaky"] + [f"good-{i}".encode() for i in range(10)]
    produce(kafka_bootstrap, topic, sequenced(keys, 5))
    seen = Batches()

    def handle(batch: list[keyshared.Record]) -> None:
        seen.note(batch)
        failures: dict[int, BaseException] = {}
        for index, record in enumerate(batch):
            seq = int(record.value)
            if record.key == b"bad" and seq == 3:
                failures[index] = ValueError("bad record 3")
            elif record.key == b"flaky" and seq == 2 and record.attempt == 1:
                failures[index] = TimeoutError("flaky once")
        if failures:
            raise keyshared.BatchError(failures)

    consumer = keyshared.KeySharedConsumer(
        _config(kafka_bootstrap, group),
        [topic],
        handle,
        workers=2,
        batch_size=8,
        retry=FAST_RETRY,
        poison="dead_letter",
    )
    with running(consumer):
        [letter] = read_dlq(kafka_bootstrap, f"{topic}.dlq", 1)
        wait_committed_to_end(kafka_bootstrap, group, topic)
    handled = seen.handled()
    # The named records failed on their own: bad#3 three times then dead-lettered, flaky#2
    # retried once; no other record ran twice, although it shared a batch with them.
    attempts: dict[tuple[bytes, int], list[int]] = defaultdict(list)
    for key, seq, attempt in handled:
        attempts[(key, seq)].append(attempt)
    assert attempts.pop((b"bad", 3)) == [1, 2, 3]
    assert attempts.pop((b"flaky", 2)) == [1, 2]
    assert all(runs == [1] for runs in attempts.values()), attempts
    assert len(attempts) == 12 * 5 - 2
    assert letter.key() == b"bad" and letter.value() == b"3"
    assert header(letter, DlqHeader.ERROR_MESSAGE) == b"bad record 3"
    assert header(letter, DlqHeader.ATTEMPTS) == b"3"
    # Per key, each record's first run came after its predecessor's last run.
    firsts = [(k, s) for k, s, a in handled if a == 1]
    for key in keys:
        assert [s for k, s in firsts if k == key] == [1, 2, 3, 4, 5]


def test_any_other_exception_fails_the_whole_batch(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    topic, group = new_topic(partitions=1), new_group("batch-raise")
    keys = [f"k{i}".encode() for i in range(20)]
    produce(kafka_bootstrap, topic, [(key, 1) for key in keys])
    seen = Batches()
    failed_once: list[list[tuple[bytes, int, int]]] = []

    def handle(batch: list[keyshared.Record]) -> None:
        seen.note(batch)
        if not failed_once:
            failed_once.append([(r.key, int(r.value), r.attempt) for r in batch])
            raise ConnectionError("database unavailable")

    consumer = keyshared.KeySharedConsumer(
        _config(kafka_bootstrap, group),
        [topic],
        handle,
        workers=1,
        batch_size=50,
        retry=FAST_RETRY,
    )
    with running(consumer):
        wait_committed_to_end(kafka_bootstrap, group, topic)
    [first_batch] = failed_once
    retried = {(k, s) for k, s, a in seen.handled() if a == 2}
    assert retried == {(k, s) for k, s, _ in first_batch}, "every record of the batch retried"
    assert {(k, s) for k, s, _ in seen.handled()} == {(key, 1) for key in keys}


def test_async_batch_handler_keeps_per_key_order(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    topic, group = new_topic(partitions=2), new_group("batch-async")
    keys = [f"k{i:02d}".encode() for i in range(30)]
    produce(kafka_bootstrap, topic, sequenced(keys, 10))
    seen = Batches()
    running_keys: set[bytes] = set()
    overlaps: list[bytes] = []

    async def handle(batch: list[keyshared.Record]) -> None:
        seen.note(batch)
        for record in batch:  # a key running in two coroutines at once would show here
            if record.key in running_keys:
                overlaps.append(record.key)
            running_keys.add(record.key)
        await asyncio.sleep(0.003)
        for record in batch:
            running_keys.discard(record.key)

    consumer = keyshared.KeySharedConsumer(
        _config(kafka_bootstrap, group), [topic], handle, workers=4, batch_size=10
    )
    with running(consumer):
        wait_for(lambda: seen.count() >= 300, WAIT, "300 records handled")
        wait_committed_to_end(kafka_bootstrap, group, topic)
    assert not overlaps
    assert max(len(call) for call in seen.calls) > 1
    assert all(len(call) <= 10 for call in seen.calls)
    _assert_in_order_once(seen.handled(), 10)


def _linger_batches(
    bootstrap: str, topic: str, group: str, handler_is_async: bool
) -> list[list[tuple[bytes, int, int]]]:
    """A warm-up record, then A and, 0.3 s later, B, then C alone: the first two batches."""
    seen = Batches()

    def handle(batch: list[keyshared.Record]) -> None:
        seen.note(batch)

    async def handle_async(batch: list[keyshared.Record]) -> None:
        seen.note(batch)

    consumer = keyshared.KeySharedConsumer(
        {**_config(bootstrap, group), "fetch.wait.max.ms": 10},
        [topic],
        handle_async if handler_is_async else handle,
        workers=1,
        batch_size=10,
        batch_linger=3.0,
    )
    produce(bootstrap, topic, [(b"warm-up", 1)])
    with running(consumer):
        wait_for(lambda: seen.count() >= 1, WAIT, "the warm-up record")
        produce(bootstrap, topic, [(b"A", 1)])
        time.sleep(0.3)  # the gap the linger must bridge
        produce(bootstrap, topic, [(b"B", 1)])
        wait_for(lambda: seen.count() >= 3, WAIT, "A and B")
        # A record arriving after a linger ran out is not left waiting for the next one.
        produce(bootstrap, topic, [(b"C", 1)])
        wait_for(lambda: seen.count() >= 4, 15, "C, alone after a linger ran out")
    return seen.calls[:2]


def test_linger_waits_for_a_short_batch_to_fill(kafka_bootstrap: str, new_topic, new_group) -> None:
    calls = _linger_batches(kafka_bootstrap, new_topic(partitions=1), new_group("linger"), False)
    assert [sorted(k for k, _, _ in call) for call in calls][1:] == [[b"A", b"B"]]


def test_async_linger_waits_for_a_short_batch_to_fill(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    calls = _linger_batches(kafka_bootstrap, new_topic(partitions=1), new_group("alinger"), True)
    assert [sorted(k for k, _, _ in call) for call in calls][1:] == [[b"A", b"B"]]
