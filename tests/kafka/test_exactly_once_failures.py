"""Exactly-once outputs against the real broker when something is wrong with an output or with
the member's transactional.id: the bad output fails its own record (retry, then the poison
policy), never the member or the other records' transactions; a fenced member stops instead
of fencing the other holder back."""

from __future__ import annotations

import logging
import threading

import pytest

from keyshared import KeySharedConsumer, RetryPolicy
from tests.kafka.support.inprocess import run_on_thread
from tests.kafka.support.journal import produce, sequenced
from tests.kafka.test_exactly_once import (
    _committed_to_end,
    assert_exactly_once,
    dead_letters,
    eos_member,
    expected_outputs,
    read_committed,
)


def test_a_bad_output_dead_letters_its_record_and_the_member_keeps_committing(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    """Three records write outputs the producer would refuse: a dict value, a value over
    ``message.max.bytes``, a topic that does not exist. Each is retried, then dead-lettered;
    the member keeps running and every other record's output is committed once, in order."""
    source = new_topic(partitions=3)
    out = new_topic(partitions=2)
    dlq = new_topic(partitions=1)
    group = new_group("eos-bad-output")
    records = sequenced([f"k{i:02d}".encode() for i in range(20)], 15)
    produce(kafka_bootstrap, source, records)
    bad = {(b"k03", 5): "dict", (b"k07", 5): "size", (b"k11", 5): "topic"}

    def handle(record) -> None:  # type: ignore[no-untyped-def]
        kind = bad.get((record.raw_key, int(record.value)))
        if kind == "dict":
            record.output.produce(out, key=record.raw_key, value={"seq": 5})
        elif kind == "size":
            record.output.produce(out, key=record.raw_key, value=b"x" * 1_500_000)
        elif kind == "topic":
            record.output.produce(f"{out}.missing", key=record.raw_key, value=record.value)
        else:
            record.output.produce(out, key=record.raw_key, value=record.value)

    retry = RetryPolicy(max_attempts=2, initial_backoff=0.05, max_backoff=0.1)
    consumer = eos_member(
        kafka_bootstrap, group, source, handle, workers=8, dlq_topic=dlq, retry=retry
    )
    thread, errors = run_on_thread(consumer)
    try:
        _committed_to_end(kafka_bootstrap, group, source, 60)
        assert thread.is_alive() and not errors, f"the member stopped: {errors}"
    finally:
        consumer.stop()
        thread.join(30)
    assert not thread.is_alive() and not errors, errors
    expected = expected_outputs(records, leaving=bad)
    assert_exactly_once(read_committed(kafka_bootstrap, out, len(records) - len(bad)), expected)
    got = dead_letters(kafka_bootstrap, dlq, len(bad))
    assert set(got) == set(bad) and all(n == 1 for n in got.values()), got


def test_a_member_fenced_by_another_holder_of_its_transactional_id_stops(
    kafka_bootstrap: str, new_topic, new_group, caplog: pytest.LogCaptureFixture
) -> None:
    """Two members given one ``transactional_id``, under steady input (each commits every
    interval): the second one's start fences the first. A first fence may be the broker's, so
    the first takes a new producer (fencing the second once); fenced again, it stops (an error
    naming the id) instead of fencing the second back for as long as both run. The second
    then owns everything; every output is committed once."""
    source = new_topic(partitions=4)
    out = new_topic(partitions=2)
    group = new_group("eos-fenced")
    keys = [f"k{i:02d}".encode() for i in range(16)]
    first_batch = sequenced(keys, 10)
    produce(kafka_bootstrap, source, first_batch)

    def handle(record) -> None:  # type: ignore[no-untyped-def]
        record.output.produce(out, key=record.raw_key, value=record.value)

    def member() -> KeySharedConsumer:
        return KeySharedConsumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": group,
             "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
            [source],
            handle,
            exactly_once=True,
            transactional_id=f"{group}-shared",
            commit_interval=0.2,
        )  # fmt: skip

    steady: list[tuple[bytes | None, int]] = []
    flowing = threading.Event()

    def feed() -> None:  # a few records every 0.1 s: both members commit every interval
        seq = 10
        while not flowing.wait(0.1):
            seq += 1
            batch = [(k, seq) for k in keys]
            produce(kafka_bootstrap, source, batch)
            steady.extend(batch)

    a, b = member(), member()
    thread_a = threading.Thread(target=a.run, daemon=True)
    thread_b = threading.Thread(target=b.run, daemon=True)
    feeder = threading.Thread(target=feed, daemon=True)
    caplog.set_level(logging.ERROR, logger="keyshared.kafka.transactions")
    thread_a.start()
    try:
        _committed_to_end(kafka_bootstrap, group, source, 60)
        feeder.start()
        thread_b.start()  # its init_transactions fences a's producer
        assert b.wait_started(30)
        thread_a.join(60)
        assert not thread_a.is_alive(), "the fenced member kept running"
        flowing.set()
        feeder.join(30)
        again = [r.getMessage() for r in caplog.records if "fenced again" in r.getMessage()]
        assert len(again) == 1 and f"{group}-shared" in again[0], again  # a's, not b's
        _committed_to_end(kafka_bootstrap, group, source, 60)
        assert thread_b.is_alive()
    finally:
        flowing.set()
        a.stop()
        b.stop()
        thread_a.join(30)
        thread_b.join(30)
    expected = expected_outputs(first_batch + steady)
    total = len(first_batch) + len(steady)
    assert_exactly_once(read_committed(kafka_bootstrap, out, total), expected)


def test_an_output_the_broker_refuses_later_dead_letters_its_record(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    """What ``produce`` cannot check comes back from the broker inside the transaction: here a
    null key on a compacted topic (INVALID_RECORD). The transaction aborts and is redone once;
    the refusal is pinned to its record, which is dead-lettered when redone, instead of the
    same abort and redo at every commit interval for ever."""
    source = new_topic(partitions=2)
    out = new_topic(partitions=1, config={"cleanup.policy": "compact"})
    dlq = new_topic(partitions=1)
    group = new_group("eos-refused-output")
    records = sequenced([f"k{i:02d}".encode() for i in range(10)], 10)
    produce(kafka_bootstrap, source, records)
    bad = (b"k05", 4)

    def handle(record) -> None:  # type: ignore[no-untyped-def]
        key = None if (record.raw_key, int(record.value)) == bad else record.raw_key
        record.output.produce(out, key=key, value=record.value)

    consumer = eos_member(
        kafka_bootstrap, group, source, handle, dlq_topic=dlq, retry=RetryPolicy(max_attempts=1)
    )
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        _committed_to_end(kafka_bootstrap, group, source, 60)
        assert thread.is_alive()
    finally:
        consumer.stop()
        thread.join(30)
    expected = expected_outputs(records, leaving={bad})
    assert_exactly_once(read_committed(kafka_bootstrap, out, len(records) - 1), expected)
    letters = read_committed(kafka_bootstrap, dlq, 1)
    assert [(k, s) for k, seqs in letters.items() for s in seqs] == [bad]
