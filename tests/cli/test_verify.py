"""`keyshared verify` on committed state made by the real consumer: exit 0, 1 and 2."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition

from keyshared import Record
from keyshared.cli.verify import verify
from keyshared.dev.topics import TopicFactory, unique_name
from keyshared.kafka.keystate import KeyStateStore
from keyshared.ops.group_status import offsets_to_ranges
from tests.cli.conftest import (
    WAIT,
    StartConsumer,
    committed_to_end,
    invoke,
    invoke_json,
)
from tests.helpers import produce, wait_until


def _records(partitions: int, per_partition: int) -> list[tuple[int, bytes | None, bytes]]:
    return [
        (p, f"k{i % 7}".encode(), f"{p}-{i}".encode())
        for i in range(per_partition)
        for p in range(partitions)
    ]


def test_verify_passes_on_a_fully_consumed_topic_and_names_what_arrives_later(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str, start: StartConsumer
) -> None:
    topic = new_topic(partitions=3)
    produce(kafka_bootstrap, topic, _records(3, 20))
    run = start(group, topic, lambda record: None)
    wait_until(lambda: committed_to_end(kafka_bootstrap, group, topic, 3), "all committed")
    run.stop()

    result = invoke(verify, ["-g", group, "-t", topic], kafka_bootstrap)
    assert result.exit_code == 0, result.output
    assert "complete" in result.stdout and "not complete" not in result.stdout
    code, data = invoke_json(verify, ["-g", group, "-t", topic, "--no-dlq"], kafka_bootstrap)
    assert code == 0 and data["complete"] and data["problems"] == []
    assert [p["committed"] for p in data["partitions"]] == [20, 20, 20]

    produce(kafka_bootstrap, topic, [(1, b"late", b"x")] * 5)
    code, data = invoke_json(verify, ["-g", group, "-t", topic], kafka_bootstrap)
    assert code == 1 and not data["complete"]
    [problem] = data["problems"]
    assert (problem["kind"], problem["partition"], problem["count"]) == ("unconsumed", 1, 5)
    assert problem["ranges"] == [[20, 24]]
    result = invoke(verify, ["-g", group, "-t", topic], kafka_bootstrap)
    assert result.exit_code == 1
    assert "not complete" in result.stdout and "20..24" in result.stdout


def test_verify_names_exactly_the_offsets_a_stopped_consumer_left_undone(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str, start: StartConsumer
) -> None:
    """Stopped while a slow key (and whatever waits behind it) is unfinished: the cursor stays
    at the slow record, the finished offsets above it are in the metadata, and verify lists
    only the offsets that were really not processed."""
    topic = new_topic(partitions=1)
    gate = threading.Event()
    done: set[int] = set()
    lock = threading.Lock()

    def handle(record: Record) -> None:
        if record.key == b"slow":
            gate.wait(WAIT)
            return
        with lock:
            done.add(record.offset)

    records = [(0, b"slow", b"0")] + [(0, f"k{i}".encode(), b"v") for i in range(19)]
    records.append((0, b"slow", b"1"))
    produce(kafka_bootstrap, topic, records)
    run = start(group, topic, handle, drain_timeout=0.5)
    try:

        def metadata_caught_up() -> bool:
            result = invoke(verify, ["-g", group, "-t", topic, "--json"], kafka_bootstrap)
            if result.exit_code == 2:  # the group may not have joined yet
                return False
            [part] = json.loads(result.stdout)["partitions"]
            with lock:
                finished = len(done)
            return finished > 0 and part["finished_above_cursor"] == finished

        previous = -1
        while True:  # until no more records finish: the rest waits behind the slow key
            wait_until(metadata_caught_up, "the finished offsets committed as metadata")
            with lock:
                now = len(done)
            if now == previous:
                break
            previous = now
            time.sleep(0.5)
        run.stop()
    finally:
        gate.set()
    with lock:
        undone = sorted(set(range(21)) - done)
    assert undone[0] == 0 and undone[-1] == 20

    code, data = invoke_json(verify, ["-g", group, "-t", topic], kafka_bootstrap)
    assert code == 1
    [problem] = data["problems"]
    assert problem["kind"] == "unconsumed" and problem["partition"] == 0
    assert problem["ranges"] == [list(r) for r in offsets_to_ranges(undone)]
    assert problem["count"] == len(undone)
    [part] = data["partitions"]
    assert part["committed"] == 0 and part["metadata"] == "keyshared"
    result = invoke(verify, ["-g", group, "-t", topic], kafka_bootstrap)
    assert result.exit_code == 1 and "unconsumed" in result.stdout


def test_verify_fails_while_a_key_is_parked_and_counts_dead_letters_per_partition(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    group: str,
    start: StartConsumer,
    dlq_for: Callable[[str], str],
) -> None:
    topic = new_topic(partitions=2)
    dlq = dlq_for(topic)

    def handle(record: Record) -> None:
        if record.value == b"poison":
            raise ValueError("cannot handle it")

    records: list[tuple[int, bytes | None, bytes]] = [
        (1, b"bad", b"ok"), (1, b"bad", b"poison"), (0, b"good", b"x"), (1, b"bad", b"3")
    ]  # fmt: skip
    records += _records(2, 10)
    offsets = produce(kafka_bootstrap, topic, records)
    run = start(group, topic, handle, poison="park")
    wait_until(lambda: committed_to_end(kafka_bootstrap, group, topic, 2), "all committed")
    run.stop()

    code, data = invoke_json(verify, ["-g", group, "-t", topic], kafka_bootstrap)
    assert code == 1, data
    [problem] = data["problems"]
    assert (problem["kind"], problem["partition"], problem["key"]) == ("parked", 1, "bad")
    assert f"since offset {offsets[1][1]}" in problem["detail"]
    assert data["dlq_topic"] == dlq and data["dead_letters"] == {"1": 2}
    assert all(p["done"] for p in data["partitions"])
    result = invoke(verify, ["-g", group, "-t", topic], kafka_bootstrap)
    assert result.exit_code == 1 and "parked" in result.stdout and "'bad'" in result.stdout

    store = KeyStateStore({"bootstrap.servers": kafka_bootstrap}, group, print, lambda *_: None)
    store.start(WAIT, create=False)
    try:
        store.release(topic, 1, b"bad", WAIT)
    finally:
        store.close()

    code, data = invoke_json(verify, ["-g", group, "-t", topic], kafka_bootstrap)
    assert code == 0 and data["complete"], data
    assert any("2 record(s) dead-lettered" in note for note in data["notes"])
    code, data = invoke_json(verify, ["-g", group, "-t", topic, "--no-dlq"], kafka_bootstrap)
    assert code == 1
    assert [(p["kind"], p["partition"], p["count"]) for p in data["problems"]] == [
        ("dead_lettered", 1, 2)
    ]


def test_a_cursor_left_on_a_transaction_marker_counts_as_complete(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str
) -> None:
    """A tool that commits the last record + 1 stops one short of the high watermark: the last
    offset is the commit marker, which no consumer ever sees."""
    topic = new_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap,
                         "transactional.id": unique_name("tx")})  # fmt: skip
    producer.init_transactions(WAIT)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, key=b"k", value=str(i).encode(), partition=0)
    producer.commit_transaction(WAIT)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    finally:
        consumer.close()

    code, data = invoke_json(verify, ["-g", group, "-t", topic], kafka_bootstrap)
    assert code == 0, data
    [part] = data["partitions"]
    assert (part["committed"], part["high_watermark"], part["pending"]) == (5, 6, [])


def test_verify_errors_exit_2_and_an_empty_topic_is_complete(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str
) -> None:
    topic = new_topic(partitions=2)
    result = invoke(verify, ["-g", group, "-t", topic], kafka_bootstrap)
    assert result.exit_code == 0, result.output  # nothing to consume, whatever the group

    produce(kafka_bootstrap, topic, [(0, b"k", b"v")])
    result = invoke(verify, ["-g", group, "-t", topic], kafka_bootstrap)
    assert result.exit_code == 2 and "is unknown" in result.output

    result = invoke(verify, ["-g", group, "-t", unique_name("missing")], kafka_bootstrap)
    assert result.exit_code == 2 and "not found" in result.output

    began = time.monotonic()
    args = ["-g", group, "-t", topic, "-b", "127.0.0.1:1", "--timeout", "2", "--json"]
    result = invoke(verify, args, kafka_bootstrap)
    assert result.exit_code == 2 and time.monotonic() - began < 10
    assert "did not answer" in result.output
    assert not result.stdout.strip() or json.loads(result.stdout)
