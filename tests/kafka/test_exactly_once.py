"""Exactly-once outputs (issue 26): consume -> transform -> produce in Kafka transactions.

Members run ``keyshared run --exactly-once`` with the journaling handler, which writes each
record's sequence number under its key to an output topic through ``record.output``. The
output topic is read with ``isolation.level=read_committed``: whatever happens to the members
(kill -9, a zombie member), every input must appear there exactly once, in per-key order, and
every dead letter exactly once too.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Container, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from keyshared import BatchError, KeySharedConsumer, RetryPolicy
from keyshared.dev import LocalCluster
from keyshared.errors import ConfigurationError
from keyshared.kafka.transactional_config import producer_config
from tests.kafka.support.faults import fault_fraction
from tests.kafka.support.journal import (
    count_finished,
    high_watermarks,
    keyshared_command,
    kill_all,
    produce,
    read_journal,
    sequenced,
    start_consumer,
    terminate,
    wait_committed_to_end,
    wait_for,
)

FAST_FAILURE = ["-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=1000"]
Seen = dict[bytes | None, list[int]]


def read_committed(
    bootstrap: str,
    topic: str,
    expected: int,
    timeout: float = 60.0,
    extra: Mapping[str, str] | None = None,
) -> Seen:
    """Every committed message of ``topic`` (values per key, in offset order), read until the
    end of each partition once at least ``expected`` were read (or the timeout). ``extra``:
    more client properties (credentials)."""
    consumer = Consumer(
        {
            **(extra or {}),
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    seen: Seen = defaultdict(list)
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        parts = [TopicPartition(topic, p, 0) for p in meta.partitions]
        consumer.assign(parts)
        at_eof: set[int] = set()
        count = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                at_eof.add(msg.partition())
                if count >= expected and len(at_eof) == len(parts):
                    break
                continue
            at_eof.discard(msg.partition())
            seen[msg.key()].append(int(msg.value()))
            count += 1
    finally:
        consumer.close()
    return seen


def assert_exactly_once(seen: Seen, expected: dict[bytes | None, list[int]]) -> None:
    duplicates = {k: [s for s, n in Counter(v).items() if n > 1] for k, v in seen.items()}
    duplicates = {k: v for k, v in duplicates.items() if v}
    assert not duplicates, f"duplicated outputs: {list(duplicates.items())[:5]}"
    missing = {k: sorted(set(v) - set(seen.get(k, []))) for k, v in expected.items()}
    missing = {k: v for k, v in missing.items() if v}
    assert not missing, f"missing outputs: {list(missing.items())[:5]}"
    extra = set(seen) - set(expected)
    assert not extra, f"outputs of unexpected keys: {sorted(extra, key=repr)[:5]}"
    disorder = {k: v for k, v in seen.items() if v != sorted(v)}
    assert not disorder, f"per-key order broken: {list(disorder.items())[:3]}"


def expected_outputs(
    records: Iterable[tuple[bytes | None, int]], leaving: Container[tuple[bytes | None, int]] = ()
) -> dict[bytes | None, list[int]]:
    """Each key's sequence numbers in produce order but for ``leaving`` (records that fail or
    are refused): what the output topic must hold."""
    expected: dict[bytes | None, list[int]] = defaultdict(list)
    for k, s in records:
        if (k, s) not in leaving:
            expected[k].append(s)
    return expected


def dead_letters(bootstrap: str, dlq: str, expected: int) -> Counter[tuple[bytes | None, int]]:
    """How many times each record was dead-lettered (committed to ``dlq``)."""
    letters = read_committed(bootstrap, dlq, expected)
    return Counter((k, s) for k, seqs in letters.items() for s in seqs)


def eos_member(
    bootstrap: str, group: str, source: str, handler: Callable[..., Any], **options: Any
) -> KeySharedConsumer:
    """An in-process exactly-once member committing every 0.2 s, so a test's records are
    committed within seconds."""
    return KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group},
        [source],
        handler,
        exactly_once=True,
        commit_interval=0.2,
        **options,
    )


def test_key_shared_mode_refuses_exactly_once() -> None:
    with pytest.raises(ConfigurationError, match="ZooKeeper"):
        KeySharedConsumer(
            {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"},
            ["t"],
            lambda r: None,
            mode="key_shared",
            exactly_once=True,
        )


@pytest.mark.parametrize("mode", ["partition", "exclusive", "async", "batch", "pull"])
def test_outputs_and_dead_letters_exactly_once_in_process(
    kafka_bootstrap: str, new_topic, new_group, mode: str
) -> None:
    """A clean run: every output and every dead letter once, in per-key order. Exclusive mode
    (serial per partition) has no poison records: it only blocks poisoned keys. ``async``: an
    ``async def`` handler; ``batch``: a batch handler failing its poison records through
    ``BatchError``; ``pull``: ``records()`` with ``ack``/``nack`` (all in partition mode)."""
    source = new_topic(partitions=3)
    out = new_topic(partitions=2)
    dlq = new_topic(partitions=1)
    group = new_group("eos")
    keys = [f"k{i:02d}".encode() for i in range(40)]
    records = sequenced(keys, 25)
    produce(kafka_bootstrap, source, records)
    poison = {(k, s) for k, s in records if fault_fraction(k, s) < 0.05 and mode != "exclusive"}

    def handle(record) -> None:  # type: ignore[no-untyped-def]
        seq = int(record.value)
        if (record.raw_key, seq) in poison:
            raise ValueError("poison")
        record.output.produce(out, key=record.raw_key, value=record.value)

    async def handle_async(record) -> None:  # type: ignore[no-untyped-def]
        handle(record)

    def handle_batch(batch) -> None:  # type: ignore[no-untyped-def]
        failures: dict[int, BaseException] = {}
        for index, record in enumerate(batch):
            try:
                handle(record)
            except ValueError as exc:
                failures[index] = exc
        if failures:
            raise BatchError(failures)

    handler = {"async": handle_async, "batch": handle_batch, "pull": None}.get(mode, handle)
    consumer = eos_member(kafka_bootstrap, group, source, handler, workers=8,
                          mode="exclusive" if mode == "exclusive" else "partition",
                          dlq_topic=dlq, retry=RetryPolicy(max_attempts=1),
                          batch_size=10 if mode == "batch" else None)  # fmt: skip

    def pull() -> None:
        for record in consumer.records():
            try:
                handle(record)
            except ValueError as exc:
                consumer.nack(record, exc)
            else:
                consumer.ack(record)

    thread = threading.Thread(target=pull if mode == "pull" else consumer.run, daemon=True)
    thread.start()
    try:
        _committed_to_end(kafka_bootstrap, group, source, 60)
    finally:
        consumer.stop()
        thread.join(30)
    assert not thread.is_alive()
    expected = expected_outputs(records, leaving=poison)
    assert_exactly_once(read_committed(kafka_bootstrap, out, len(records) - len(poison)), expected)
    got = dead_letters(kafka_bootstrap, dlq, len(poison))
    assert set(got) == poison and all(n == 1 for n in got.values()), got


def _committed_to_end(bootstrap: str, group: str, topic: str, timeout: float) -> None:
    """``wait_committed_to_end``, riding out a group coordinator that is still loading (a
    fresh or restarted broker answers NOT_COORDINATOR for a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            wait_committed_to_end(bootstrap, group, topic, timeout=deadline - time.monotonic())
            return
        except KafkaException:
            if time.monotonic() >= deadline:
                raise


def _leaders_back(bootstrap: str, topic: str) -> bool:
    try:
        high_watermarks(bootstrap, topic)
    except KafkaException:
        return False
    return True


def _start(bootstrap, group, topic, journal, out, tmp_path, name, **kw):  # type: ignore[no-untyped-def]
    return start_consumer(
        bootstrap,
        group,
        topic,
        journal,
        workers=4,
        sleep_ms="2,8",
        env={"KS_OUT_TOPIC": out, **kw.pop("env", {})},
        args=[*FAST_FAILURE, "--exactly-once", "--commit-interval", "0.5", *kw.pop("args", [])],
        log=tmp_path / f"{name}.log",
        **kw,
    )


def test_kill_9_broker_restart_and_poison_outputs_exactly_once(
    local_cluster: LocalCluster, kafka_bootstrap: str, new_topic, new_group, tmp_path: Path
) -> None:
    """kill -9 of a member mid-run, a rebalance as a new member joins, then a broker restart
    (SIGKILL), with 1% poison records dead-lettered: the committed output holds every good
    input once, in per-key order, the DLQ every poison record once, and ``keyshared verify``
    passes. The killed member's open transaction is aborted; what it (and everyone during the
    outage) finished after the last commit is redone, its outputs committed once."""
    topic = new_topic(partitions=4)
    out = new_topic(partitions=3)
    dlq = new_topic(partitions=1)
    group = new_group("eos-kill")
    keys = [f"key-{i:03d}".encode() for i in range(200)]
    records = sequenced(keys, 15)
    poison = {(k, s) for k, s in records if fault_fraction(k, s) < 0.01}
    produce(kafka_bootstrap, topic, records)
    total = len(records)
    journal = tmp_path / "journal"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    extra = {
        "env": {"KS_FAIL_ALWAYS_RATE": "0.01"},
        "args": ["--poison", "dead_letter", "--max-attempts", "1", "--dlq-topic", dlq],
    }

    def start(name: str) -> None:
        procs[name] = _start(kafka_bootstrap, group, topic, journal, out, tmp_path, name,
                             env=dict(extra["env"]), args=list(extra["args"]))  # fmt: skip

    try:
        start("A")
        start("B")
        wait_for(lambda: count_finished(journal) >= 0.3 * total, 90, "30% processed")
        procs["A"].send_signal(signal.SIGKILL)
        procs["A"].wait(10)
        start("C")
        at_kill = count_finished(journal)
        wait_for(lambda: count_finished(journal) >= at_kill + 0.2 * total, 90, "C working")
        local_cluster.stop_kafka(kill=True)
        local_cluster.start_kafka()
        wait_for(lambda: _leaders_back(kafka_bootstrap, topic), 60, "partition leaders back")
        _committed_to_end(kafka_bootstrap, group, topic, 120)
        assert terminate(procs["B"]) == 0
        assert terminate(procs["C"]) == 0
    finally:
        kill_all(procs.values())
    redone = len([e for e in read_journal(journal) if e.kind == "E"]) - (total - len(poison))
    print(f"records finished more than once (redone, outputs aborted): {redone}")
    expected = expected_outputs(records, leaving=poison)
    assert_exactly_once(read_committed(kafka_bootstrap, out, total - len(poison)), expected)
    got = dead_letters(kafka_bootstrap, dlq, len(poison))
    assert poison and set(got) == poison and all(n == 1 for n in got.values()), got
    verified = subprocess.run(
        [
            *keyshared_command(),
            "verify",
            "-b",
            kafka_bootstrap,
            "-g",
            group,
            "-t",
            topic,
            "--dlq-topic",
            dlq,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_zombie_cannot_commit(kafka_bootstrap: str, new_topic, new_group, tmp_path: Path) -> None:
    """SIGSTOP a member past its session, let another take over, SIGCONT it: the zombie's
    transaction is refused (group generation, KIP-447) and the output stays exactly once."""
    topic = new_topic(partitions=2)
    out = new_topic(partitions=2)
    group = new_group("eos-zombie")
    keys = [f"key-{i:03d}".encode() for i in range(100)]
    records = sequenced(keys, 20)
    produce(kafka_bootstrap, topic, records)
    total = len(records)
    journal = tmp_path / "journal"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        # Slow records: plenty finish between commits, so a stopped zombie holds some.
        procs["Z"] = _start(kafka_bootstrap, group, topic, journal, out, tmp_path, "Z",
                            args=["--commit-interval", "3"])  # fmt: skip
        wait_for(lambda: count_finished(journal) >= 0.1 * total, 60, "10% processed")
        procs["Z"].send_signal(signal.SIGSTOP)
        stopped_at = count_finished(journal)
        procs["B"] = _start(kafka_bootstrap, group, topic, journal, out, tmp_path, "B")
        # B owns everything once Z's session expired; it redoes what Z had not committed.
        wait_for(lambda: count_finished(journal) >= stopped_at + 0.2 * total, 90, "B working")
        procs["Z"].send_signal(signal.SIGCONT)
        _committed_to_end(kafka_bootstrap, group, topic, 120)
        assert terminate(procs["B"]) == 0
        terminate(procs["Z"])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
        kill_all(procs.values())
    zombie_log = (tmp_path / "Z.log").read_text(errors="replace")
    assert "transaction failed" in zombie_log or "lost" in zombie_log, zombie_log[-3000:]
    events = read_journal(journal)
    by_zombie = {(e.key, e.seq) for e in events if e.kind == "E" and e.pid == procs["Z"].pid}
    by_b = {(e.key, e.seq) for e in events if e.kind == "E" and e.pid == procs["B"].pid}
    # The zombie had finished records it never committed: B redid them, and still each
    # output appears once, so none of the zombie's outputs of them was committed.
    assert by_zombie & by_b, "the zombie held no uncommitted finished records"
    assert_exactly_once(read_committed(kafka_bootstrap, out, total), expected_outputs(records))


def test_a_fence_inside_a_transaction_surfaces_as_a_fatal_produce(
    kafka_bootstrap: str, new_topic
) -> None:
    """What the committer's fence check depends on, pinned down on the real broker: a producer
    fenced while its transaction is open learns it when librdkafka adds a partition to the
    transaction; from then on ``produce()`` raises only _FATAL, and the next poll raises the
    cause, _FENCED (confluent-kafka's error_cb)."""
    out = new_topic(partitions=3)
    txn_id = f"fence-{out}"
    config = {"bootstrap.servers": kafka_bootstrap}
    producer = Producer(producer_config(config, txn_id))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(out, b"before", b"k", partition=0)
    producer.flush(30)
    fencer = Producer(producer_config(config, txn_id))
    fencer.init_transactions(30)  # bumps the epoch: the open transaction is aborted
    deadline = time.monotonic() + 30
    partition = 1
    while True:  # a new partition makes librdkafka ask the coordinator, which refuses
        try:
            producer.produce(out, b"after", b"k", partition=partition)
        except KafkaException as exc:
            surfaced = exc.args[0]
            break
        partition = 1 + partition % 2
        assert time.monotonic() < deadline, "the fence never reached produce()"
        time.sleep(0.05)  # librdkafka's own thread sends the request: nothing to await here
    assert surfaced.code() == KafkaError._FATAL, surfaced
    with pytest.raises(KafkaException) as cause:
        producer.poll(0)
    assert cause.value.args[0].code() == KafkaError._FENCED and cause.value.args[0].fatal()


def test_stale_generation_cannot_commit_a_transaction(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    """The fencing the zombie test relies on, pinned down: offsets sent with the group metadata
    of an older generation are refused, and the transaction's outputs never become visible."""
    topic = new_topic(partitions=2)
    out = new_topic(partitions=1)
    group = new_group("eos-stale")
    produce(kafka_bootstrap, topic, [(b"k", 1)])
    config = {"bootstrap.servers": kafka_bootstrap, "group.id": group,
              "enable.auto.commit": False, "session.timeout.ms": 6000}  # fmt: skip
    first = Consumer(config)
    second = Consumer(config)
    assigned: list[int] = []
    first.subscribe([topic], on_assign=lambda c, ps: assigned.append(len(ps)))
    try:
        wait_for(lambda: first.poll(0.2) is not None or bool(assigned), 30, "first assigned")
        stale = first.consumer_group_metadata()
        second.subscribe([topic])
        rebalanced = len(assigned)
        wait_for(lambda: (first.poll(0.1), second.poll(0.1)) and len(assigned) > rebalanced,
                 30, "a rebalance")  # fmt: skip
        producer = Producer(producer_config(config, f"stale-{group}"))
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(out, b"zombie", b"k")
        with pytest.raises(KafkaException) as refused:
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], stale, 30)
            producer.commit_transaction(30)
        assert refused.value.args[0].txn_requires_abort(), refused.value
        producer.abort_transaction(30)
    finally:
        first.close()
        second.close()
    assert not read_committed(kafka_bootstrap, out, 0, timeout=10)


def test_a_missing_dlq_topic_holds_the_commit_until_it_exists(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    """A dead letter that cannot be written holds the transaction (outputs and cursors), as
    the at-least-once writer holds the cursor; once the DLQ topic exists everything commits,
    each output and dead letter once."""
    source = new_topic(partitions=2)
    out = new_topic(partitions=1)
    dlq = f"{source}.missing-dlq"
    group = new_group("eos-nodlq")
    keys = [f"k{i}".encode() for i in range(20)]
    records = sequenced(keys, 10)
    produce(kafka_bootstrap, source, records)
    # Every key's first record fails: no output of any key can be ready before that key's
    # dead letter, so every transaction with an output also holds a dead letter. With two
    # poison records only, a commit of the other partition's outputs could go out before
    # either was reached, which is allowed (nothing to hold yet); a loaded CI run did so.
    poison = {(key, 1) for key in keys}

    def handle(record) -> None:  # type: ignore[no-untyped-def]
        if (record.raw_key, int(record.value)) in poison:
            raise ValueError("poison")
        record.output.produce(out, key=record.raw_key, value=record.value)

    consumer = eos_member(
        kafka_bootstrap, group, source, handle, dlq_topic=dlq, retry=RetryPolicy(max_attempts=1)
    )
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    try:
        assert consumer.wait_started(30)
        time.sleep(2.0)  # ten commit intervals: every one of them must be held
        assert not read_committed(kafka_bootstrap, out, 0, timeout=10), "committed without DLQ"
        for future in admin.create_topics([NewTopic(dlq, 1)]).values():
            future.result(30)
        _committed_to_end(kafka_bootstrap, group, source, 60)
    finally:
        consumer.stop()
        thread.join(30)
    expected = expected_outputs(records, leaving=poison)
    assert_exactly_once(read_committed(kafka_bootstrap, out, len(records) - len(poison)), expected)
    try:
        letters = read_committed(kafka_bootstrap, dlq, len(poison))
    finally:
        admin.delete_topics([dlq])
    assert sorted((k, s) for k, seqs in letters.items() for s in seqs) == sorted(poison)
