"""Bad input gets a clear error and loses nothing (issues 4 and 14, SPEC "Guarantees").

The catalogue of issue 14 (``docs/guarantees.md``, "Bad input"), one test each; items proved
elsewhere are named there. Invalid or conflicting configuration fails at construction naming
the option; a missing topic or an unreachable broker or ZooKeeper fails clearly within a bound;
odd keys (binary, empty, null, 1 MiB) keep their per-key order; 10 MiB values are processed
and dead-lettered; foreign or garbage commit metadata is ignored without skipping a record; a
handler raising a ``BaseException`` takes the poison path and its worker lives on; a handler
that never returns is reported as stuck while the cursor holds; SIGTERM during a revoke's drain
still drains, commits and exits 0.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import keyshared
from coordinator import CoordinatorUnreachable, ZooKeeperCoordinator
from keyshared.core.offsets import METADATA_PREFIX
from keyshared.dev.topics import unique_name
from tests.kafka.support.inprocess import Recorder, running
from tests.kafka.support.journal import (
    REPO_ROOT,
    check,
    committed,
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

BOOTSTRAP_PLACEHOLDER = "127.0.0.1:9"  # construction never connects


def _config(**extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": BOOTSTRAP_PLACEHOLDER, "group.id": "g", **extra}


# -- invalid configuration: at construction, naming the option -------------------------------


@pytest.mark.parametrize(
    ("config", "options", "option"),
    [
        (_config(**{"enable.auto.commit": True}), {}, "enable.auto.commit"),
        (_config(**{"enable.auto.commit": "true"}), {}, "enable.auto.commit"),
        (_config(**{"enable.auto.offset.store": "true"}), {}, "enable.auto.offset.store"),
        ({"bootstrap.servers": BOOTSTRAP_PLACEHOLDER}, {}, "group.id"),
        ({"group.id": "g"}, {}, "bootstrap.servers"),
        (_config(), {"workers": 0}, "workers"),
        (_config(), {"workers": -3}, "workers"),
        (_config(), {"wrokers": 4}, "wrokers"),
        (_config(), {"poison": "explode"}, "poison"),
        (_config(), {"mode": "exclusive", "poison": "drop"}, "poison"),
        (_config(), {"max_window": 0}, "max_window"),
        (_config(), {"commit_interval": 0}, "commit_interval"),
        (_config(), {"drain_timeout": -1}, "drain_timeout"),
        (_config(), {"mode": "sideways"}, "mode"),
        (_config(), {"key_filters": [""]}, "key_filters"),
        # Values that compare false with everything would pass "> 0" and never come due.
        (_config(), {"commit_interval": math.nan}, "commit_interval"),
        (_config(), {"drain_timeout": math.inf}, "drain_timeout"),
        (_config(), {"startup_timeout": math.nan}, "startup_timeout"),
        (_config(), {"stuck_after": 0}, "stuck_after"),
        (_config(), {"wedged_after": math.nan}, "wedged_after"),
        (_config(), {"wedged_after": 10, "drain_timeout": 30}, "wedged_after"),
        (_config(), {"redact": "not callable"}, "redact"),
        (_config(), {"metrics_port": 70000}, "metrics_port"),
        (_config(), {"dlq_topic": ""}, "dlq_topic"),
        (_config(), {"poison_by_topic": {"t": "explode"}}, "poison_by_topic['t']"),
        (_config(), {"batch_size": 0}, "batch_size"),
        (_config(), {"batch_size": True}, "batch_size"),
        (_config(), {"batch_size": 8, "batch_linger": -1}, "batch_linger"),
        (_config(), {"batch_size": 8, "batch_linger": math.inf}, "batch_linger"),
        (_config(), {"batch_linger": 0.1}, "batch_linger"),  # without batch_size
        # Conflicting options: each is valid alone, not together.
        (
            _config(),
            {"mode": "exclusive", "poison_by_topic": {"t": "drop"}},
            "poison_by_topic['t']",
        ),
        (_config(), {"mode": "key_shared"}, "coordinator"),
        (_config(**{"max.poll.interval.ms": 10_000}), {"drain_timeout": 10}, "drain_timeout"),
        (
            _config(**{"group.protocol": "consumer", "partition.assignment.strategy": "range"}),
            {},
            "partition.assignment.strategy",
        ),
    ],
    ids=lambda value: repr(value)[:40],
)
def test_invalid_configuration_names_the_option(
    config: dict[str, Any], options: dict[str, Any], option: str
) -> None:
    with pytest.raises(keyshared.ConfigurationError) as caught:
        keyshared.KeySharedConsumer(config, ["t"], print, **options)
    assert caught.value.option == option
    assert option in str(caught.value)


@pytest.mark.parametrize(
    ("prop", "value"),
    [("no.such.property", "1"), ("session.timeout.ms", "not-a-number")],
)
def test_invalid_librdkafka_property_fails_at_construction(prop: str, value: str) -> None:
    """SPEC: invalid configuration fails at construction with a message naming the option.

    A property librdkafka rejects must not wait for ``run()`` (where, with the broker down, it
    would be reported as an unreachable broker instead, or as a raw KafkaException).
    """
    with pytest.raises(keyshared.ConfigurationError) as caught:
        keyshared.KeySharedConsumer(_config(**{prop: value}), ["t"], print)
    assert prop in str(caught.value)


def test_options_object_and_keyword_options_conflict() -> None:
    with pytest.raises(keyshared.ConfigurationError) as caught:
        keyshared.KeySharedConsumer(
            _config(), ["t"], print, options=keyshared.ConsumerOptions(), workers=2
        )
    assert caught.value.option == "options"


def test_batch_size_needs_a_handler() -> None:
    with pytest.raises(keyshared.ConfigurationError) as caught:
        keyshared.KeySharedConsumer(_config(), ["t"], None, batch_size=10)
    assert caught.value.option == "batch_size"


def test_handler_must_be_callable() -> None:
    with pytest.raises(keyshared.ConfigurationError) as caught:
        keyshared.KeySharedConsumer(_config(), ["t"], "not a function")  # type: ignore[arg-type]
    assert caught.value.option == "handler"


# -- unknown topic, unreachable broker: clear errors within a bound ---------------------------


def test_unknown_topic_is_a_clear_error(kafka_bootstrap: str) -> None:
    missing = unique_name("no-such-topic")
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": unique_name("g")},
        [missing],
        print,
        startup_timeout=10,
    )
    started = time.monotonic()
    with pytest.raises(keyshared.ConfigurationError) as caught:
        consumer.run()
    assert time.monotonic() - started < 15
    assert caught.value.option == "topics"
    assert missing in str(caught.value)


def test_unreachable_broker_fails_within_the_startup_timeout() -> None:
    with socket.socket() as sock:  # a port nobody listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"127.0.0.1:{port}"
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": address, "group.id": "g"}, ["t"], print, startup_timeout=3
    )
    started = time.monotonic()
    with pytest.raises(keyshared.UnreachableError) as caught:
        consumer.run()
    elapsed = time.monotonic() - started
    assert elapsed < 8, f"took {elapsed:.1f}s with startup_timeout=3"
    assert address in str(caught.value)


# -- odd keys --------------------------------------------------------------------------------


def _consume_all(
    bootstrap: str,
    topic: str,
    group: str,
    recorder: Recorder,
    expected: int,
    timeout: float = 30,
    **options: Any,
) -> None:
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group},
        [topic],
        recorder,
        poison="drop",
        **options,
    )
    with running(consumer):
        wait_for(lambda: recorder.finished() >= expected, timeout, f"{expected} records")
        wait_committed_to_end(bootstrap, group, topic)


def test_binary_and_non_utf8_keys_keep_their_order(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    topic = new_topic(partitions=2)
    keys = [b"\xff\xfe\xfd", b"\x80", b"\x00", b"\x00\x00", bytes(range(256)), b"caf\xe9"]
    produce(kafka_bootstrap, topic, sequenced(keys, 30))
    recorder = Recorder(lambda r: time.sleep(0.001))
    _consume_all(kafka_bootstrap, topic, new_group(), recorder, 6 * 30, workers=4)
    report = check(recorder.snapshot(), dict.fromkeys(keys, 30))
    assert not report.missing and not report.violations, report.summary()
    assert {e.key for e in recorder.snapshot()} == set(keys)  # byte for byte


def test_empty_key_is_one_ordered_key_and_null_keys_are_unordered(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_bootstrap, topic, sequenced([None, b""], 20))
    meet = threading.Barrier(2, timeout=10)
    met: list[bool] = []

    def work(record: keyshared.Record) -> None:
        if record.key is None and int(record.value) <= 2:
            try:
                meet.wait()  # passes only if two null-key records run at the same time
                met.append(True)
            except threading.BrokenBarrierError:
                met.append(False)
        time.sleep(0.002)

    recorder = Recorder(work)
    _consume_all(kafka_bootstrap, topic, new_group(), recorder, 40, workers=4)
    events = recorder.snapshot()
    empty = check([e for e in events if e.key == b""], {b"": 20})
    assert not empty.missing and not empty.violations, empty.summary()
    assert met == [True, True], "null-key records never ran concurrently"
    assert sum(1 for e in events if e.key is None and e.kind == "E") == 20


def test_null_keys_ordered_when_asked(kafka_bootstrap: str, new_topic, new_group) -> None:
    topic = new_topic(partitions=1)
    produce(kafka_bootstrap, topic, sequenced([None, b"", b"x"], 20))
    recorder = Recorder(lambda r: time.sleep(0.002))
    _consume_all(
        kafka_bootstrap, topic, new_group(), recorder, 60, workers=4, null_keys_ordered=True
    )
    report = check(recorder.snapshot(), {None: 20, b"": 20, b"x": 20})
    assert not report.missing and not report.violations, report.summary()


def test_one_mebibyte_keys(kafka_bootstrap: str, new_topic, new_group) -> None:
    limit = str(4 * 1024 * 1024)
    topic = new_topic(partitions=2, config={"max.message.bytes": limit})
    keys = [bytes([65 + i]) * (1024 * 1024) for i in range(3)]
    produce(
        kafka_bootstrap,
        topic,
        sequenced(keys, 4),
        extra={"message.max.bytes": limit, "batch.size": limit, "linger.ms": 0},
    )
    recorder = Recorder()
    _consume_all(kafka_bootstrap, topic, new_group(), recorder, 12, timeout=60, workers=4)
    report = check(recorder.snapshot(), dict.fromkeys(keys, 4))
    assert not report.missing and not report.violations, report.summary()


# -- a handler raising BaseException ---------------------------------------------------------


class Fatal(BaseException):
    """Not an Exception: escapes ``except Exception`` on purpose."""


class Interrupted(KeyboardInterrupt):
    pass


@pytest.mark.parametrize("error", [Fatal("boom"), SystemExit(3), Interrupted()], ids=repr)
def test_handler_raising_base_exception_takes_the_poison_path(
    kafka_bootstrap: str, new_topic, new_group, error: BaseException
) -> None:
    topic = new_topic(partitions=1)
    dlq = new_topic(partitions=1, prefix="dlq")
    group = new_group()
    produce(kafka_bootstrap, topic, [(b"bad", 1), (b"bad", 2), (b"good", 1), (b"good", 2)])
    calls: list[tuple[bytes, int, int]] = []

    def work(record: keyshared.Record) -> None:
        calls.append((record.key, int(record.value), record.attempt))
        if record.key == b"bad" and int(record.value) == 1:
            raise error

    recorder = Recorder(work)
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group},
        [topic],
        recorder,
        workers=1,  # one thread: it must survive the raise to run the records after it
        poison="dead_letter",
        dlq_topic=dlq,
        retry=keyshared.RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.05),
    )
    with running(consumer):
        wait_for(lambda: recorder.finished() >= 4, 30, "every record")
        wait_committed_to_end(kafka_bootstrap, group, topic)
    # Not an Exception: not retried (retriable is Exception by default), dead-lettered at once.
    assert calls.count((b"bad", 1, 1)) == 1 and not [c for c in calls if c[2] > 1]
    assert {(k, s) for k, s, _ in calls} == {(b"bad", 1), (b"bad", 2), (b"good", 1), (b"good", 2)}
    letters = _read_all(kafka_bootstrap, dlq, 1)
    assert len(letters) == 1
    headers = dict(letters[0].headers())
    assert letters[0].key() == b"bad" and letters[0].value() == b"1"
    assert headers["keyshared.source.topic"] == topic.encode()
    assert headers["keyshared.source.offset"] == b"0"
    assert type(error).__name__.encode() in headers["keyshared.error.class"]


def _read_all(bootstrap: str, topic: str, expected: int) -> list[Any]:
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_name("r"), "enable.auto.commit": False}
    )
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        messages: list[Any] = []
        deadline = time.monotonic() + 15
        while len(messages) < expected and time.monotonic() < deadline:
            messages += [m for m in reader.consume(100, 0.5) if m.error() is None]
        return messages
    finally:
        reader.close()


# -- unreachable ZooKeeper: a clear error within the connect timeout ----------------------------


def _closed_port() -> int:
    """A loopback port nobody listens on (the socket that found it is closed again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_zookeeper_fails_within_the_connect_timeout(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    topic = new_topic(partitions=1)
    group = new_group()
    produce(kafka_bootstrap, topic, sequenced([b"a"], 3))
    hosts = f"127.0.0.1:{_closed_port()}"
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group},
        [topic],
        print,
        mode="key_shared",
        coordinator=ZooKeeperCoordinator(hosts, connect_timeout=3),
    )
    started = time.monotonic()
    with pytest.raises(CoordinatorUnreachable) as caught:
        consumer.run()
    elapsed = time.monotonic() - started
    assert elapsed < 10, f"took {elapsed:.1f}s with connect_timeout=3"
    assert hosts in str(caught.value) and "did not answer within 3" in str(caught.value)
    assert isinstance(caught.value, keyshared.UnreachableError)
    # Nothing was consumed, so nothing was committed: every record is still there to process.
    assert all(offset < 0 for offset, _ in committed(kafka_bootstrap, group, topic).values())


def test_unreachable_zookeeper_is_a_clear_cli_error(kafka_bootstrap: str, new_topic) -> None:
    topic = new_topic(partitions=1)
    hosts = f"127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    result = subprocess.run(
        [*keyshared_command(), "run", "tests.kafka.support.journal_handler:handle",
         "-b", kafka_bootstrap, "-g", unique_name("g"), "-t", topic,
         "--mode", "key_shared", "--zookeeper", hosts, "--startup-timeout", "4"],
        cwd=REPO_ROOT, env={**os.environ, "KS_JOURNAL": os.devnull},
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.returncode not in (0, None), result.stderr[-2000:]
    assert hosts in result.stderr and "did not answer within 4" in result.stderr, result.stderr[
        -2000:
    ]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    # --startup-timeout bounds the ZooKeeper connection too; the process start adds little.
    assert elapsed < 20, f"took {elapsed:.1f}s"


# -- 10 MiB values ---------------------------------------------------------------------------

TEN_MIB = 10 * 1024 * 1024


def test_ten_mebibyte_values_are_processed_and_dead_lettered(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    """Topic, producer and DLQ allow 12 MiB; the consumer's fetch defaults already return a
    record larger than ``max.partition.fetch.bytes`` (librdkafka grows the buffer). A 10 MiB
    poison record reaches the DLQ byte for byte: the DLQ producer must not cap it at
    librdkafka's 1 MB default (it did, and the dead letter was retried forever)."""
    limit = str(12 * 1024 * 1024)
    topic = new_topic(partitions=2, config={"max.message.bytes": limit})
    dlq = new_topic(partitions=1, config={"max.message.bytes": limit}, prefix="dlq")
    group = new_group()
    values = {(b"big-a", 1): b"a" * TEN_MIB, (b"big-b", 1): b"b" * TEN_MIB,
              (b"big-a", 2): b"c" * TEN_MIB, (b"poison", 1): b"p" * TEN_MIB}  # fmt: skip
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": limit,
                         "enable.idempotence": True, "linger.ms": 0})  # fmt: skip
    for (key, _seq), value in values.items():
        producer.produce(topic, key=key, value=value)
        producer.flush(60)
    assert producer.flush(60) == 0
    seen: list[tuple[bytes, int, bytes]] = []

    def work(record: keyshared.Record) -> None:
        if record.key == b"poison":
            raise keyshared.DoNotRetry("this big one is poison")
        seen.append((record.key, len(record.value), record.value[:1]))

    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group},
        [topic],
        work,
        workers=2,
        poison="dead_letter",
        dlq_topic=dlq,
    )
    with running(consumer):
        wait_committed_to_end(kafka_bootstrap, group, topic, timeout=90)
    assert sorted(seen) == sorted(
        (key, TEN_MIB, value[:1]) for (key, _), value in values.items() if key != b"poison"
    )
    letters = _read_all(kafka_bootstrap, dlq, 1)
    assert len(letters) == 1 and letters[0].key() == b"poison"
    assert letters[0].value() == values[(b"poison", 1)]


# -- foreign or garbage commit metadata ----------------------------------------------------------


@pytest.mark.parametrize(
    "metadata",
    [
        "written by another tool",
        METADATA_PREFIX + "!!!not base85!!!",
        METADATA_PREFIX + "0" * 3000,
        "\xff garbage \u2603 {",
    ],
    ids=["foreign", "corrupt-base85", "long-garbage", "binary-ish"],
)
def test_garbage_commit_metadata_is_ignored_and_nothing_is_skipped(
    kafka_bootstrap: str, new_topic, new_group, metadata: str
) -> None:
    """A group whose committed metadata is garbage (another tool's, or a damaged keyshared
    one): the consumer resumes at the committed offset, treats nothing above it as done,
    processes every record from there, and replaces the metadata with its own."""
    topic = new_topic(partitions=1)
    group = new_group()
    keys = [b"a", b"b", b"c"]
    produce(kafka_bootstrap, topic, sequenced(keys, 10))
    start = 7
    committer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group,
                          "enable.auto.commit": False})  # fmt: skip
    try:
        committer.commit(
            offsets=[TopicPartition(topic, 0, start, metadata=metadata)], asynchronous=False
        )
    finally:
        committer.close()
    recorder = Recorder()
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group}, [topic], recorder, workers=4
    )
    with running(consumer):
        wait_for(lambda: recorder.finished() >= 30 - start, 30, "the records after the commit")
        wait_committed_to_end(kafka_bootstrap, group, topic)
    offsets = sorted(e.offset for e in recorder.snapshot() if e.kind == "E")
    assert offsets == list(range(start, 30)), "a record was skipped or redone"
    offset, final = committed(kafka_bootstrap, group, topic)[0]
    assert offset == 30 and final != metadata


# -- a handler that never returns --------------------------------------------------------------


def _metric(url: str, name: str, topic: str, partition: int) -> float | None:
    """The value of ``name`` for ``topic[partition]`` on a ``/metrics`` page, if present."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    for line in text.splitlines():
        if (
            line.startswith(name + "{")
            and f'topic="{topic}"' in line
            and f'partition="{partition}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_handler_that_never_returns_is_reported_stuck_and_the_cursor_holds(
    kafka_bootstrap: str, new_topic, new_group, caplog: pytest.LogCaptureFixture
) -> None:
    topic = new_topic(partitions=1)
    group = new_group()
    produce(kafka_bootstrap, topic, [(b"stuck", 1), *sequenced([b"a", b"b"], 5)])
    release = threading.Event()

    def work(record: keyshared.Record) -> None:
        if record.key == b"stuck":
            release.wait(120)  # "never" returns while the test looks; released for teardown

    recorder = Recorder(work)
    caplog.set_level(logging.WARNING, logger="keyshared.kafka.poll_loop")
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group},
        [topic],
        recorder,
        workers=2,
        stuck_after=1.0,
        commit_interval=0.2,
        metrics_port=0,
    )

    def stuck_lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if "stuck record" in r.getMessage()]

    try:
        with running(consumer):
            wait_for(lambda: recorder.finished() >= 10, 30, "the other keys' records")
            wait_for(stuck_lines, 15, "the stuck-record warning")
            url = consumer.metrics_url
            assert url is not None
            name = "keyshared_partition_oldest_incomplete_age_seconds"
            # Two more samples after the warning: it must not repeat for the same record.
            first_age = _metric(url, name, topic, 0) or 0.0
            wait_for(lambda: (_metric(url, name, topic, 0) or 0.0) >= first_age + 2, 15, "the age")
            lines = stuck_lines()
            assert len(lines) == 1, lines
            assert f"{topic}[0]@0 key=b'stuck'" in lines[0]
            assert "holds at 0" in lines[0]
            # The other keys finished, yet the committed offset stays at the stuck record;
            # their offsets travel in the metadata.
            wait_for(
                lambda: committed(kafka_bootstrap, group, topic)[0][1].startswith(METADATA_PREFIX),
                15,
                "a commit carrying the finished offsets",
            )
            assert committed(kafka_bootstrap, group, topic)[0][0] == 0
            release.set()
            wait_committed_to_end(kafka_bootstrap, group, topic)
    finally:
        release.set()
    report = check(recorder.snapshot(), {b"stuck": 1, b"a": 5, b"b": 5})
    assert not report.missing and not report.violations, report.summary()


# -- SIGTERM while a revoke drains a slow record ------------------------------------------------


def test_sigterm_during_a_revoke_drain_drains_commits_and_exits_0(
    kafka_bootstrap: str, new_topic, new_group, tmp_path: Path
) -> None:
    """Member A runs a slow record; B joins (eager assignor: A revokes everything and drains);
    SIGTERM reaches A during that drain. A finishes the record, commits, exits 0; B takes over
    from the commit: nothing lost, nothing redone, per-key order kept."""
    topic = new_topic(partitions=2)
    group = new_group("drain")
    keys = [f"k{i}".encode() for i in range(20)]
    produce(kafka_bootstrap, topic, [(b"slow", 1), *sequenced(keys, 5)])
    journal = tmp_path / "journal"
    port = _closed_port()  # free now; A's metrics endpoint binds it
    eager = ["-X", "partition.assignment.strategy=range", "-X", "heartbeat.interval.ms=500"]
    env = {"KS_SLOW_KEY": "slow", "KS_SLOW_SECONDS": "8"}
    a = start_consumer(kafka_bootstrap, group, topic, journal, workers=4, env=env,
                       args=[*eager, "--metrics-port", str(port), "--drain-timeout", "40"],
                       log=tmp_path / "a.log")  # fmt: skip
    procs = [a]
    try:
        wait_for(lambda: count_finished(journal) >= 100, 60, "A's fast records")
        wait_for(lambda: any(e.key == b"slow" for e in read_journal(journal)), 30, "slow start")
        b = start_consumer(kafka_bootstrap, group, topic, journal, workers=4, env=env,
                           args=eager, log=tmp_path / "b.log")  # fmt: skip
        procs.append(b)

        def revoking() -> bool:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            return any(
                line.startswith("keyshared_rebalances_total{")
                and 'kind="revoked"' in line
                and float(line.rsplit(" ", 1)[1]) >= 1
                for line in text.decode().splitlines()
            )

        wait_for(revoking, 30, "A's revoke (its drain waits for the slow record)")
        assert not any(e.key == b"slow" and e.kind == "E" for e in read_journal(journal)), (
            "the slow record ended before the SIGTERM: the drain was not under way"
        )
        assert terminate(a, timeout=60) == 0, (tmp_path / "a.log").read_text()[-3000:]
        wait_committed_to_end(kafka_bootstrap, group, topic, timeout=60)
        assert terminate(b, timeout=60) == 0, (tmp_path / "b.log").read_text()[-3000:]
    finally:
        kill_all(procs)
    log_a = (tmp_path / "a.log").read_text()
    assert log_a.index("SIGTERM: draining") < log_a.index("revoke: released"), log_a[-3000:]
    report = check(read_journal(journal), {b"slow": 1, **dict.fromkeys(keys, 5)})
    assert not report.missing and not report.violations, report.summary()
    assert report.duplicates == 0, report.summary()
    ends = high_watermarks(kafka_bootstrap, topic)
    assert {p: o for p, (o, _) in committed(kafka_bootstrap, group, topic).items()} == ends
