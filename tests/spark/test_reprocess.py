"""Backfills with ``keyshared.spark.reprocess``: per-key order, each record once, failures
recorded per record and dead-lettered with the live consumer's headers."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from confluent_kafka import Producer

from keyshared.cli import cli
from keyshared.dev.topics import TopicFactory
from keyshared.spark import read_topic, reprocess
from tests.spark.handlers import LoggingHandler
from tests.spark.support import WAIT, DlqHeader, header, read_all

RECORDS, KEYS, PARTITIONS = 12_000, 150, 3


def _produce(bootstrap: str, topic: str) -> dict[tuple[int, int], bytes | None]:
    """Keyed records (1 in 100 fails), plus null-key ones; returns key per (partition, offset)."""
    rng = random.Random(11)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20})  # fmt: skip
    where: dict[tuple[int, int], bytes | None] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        where[(msg.partition(), msg.offset())] = msg.key()

    for i in range(RECORDS):
        key = None if i % 50 == 0 else b"key-%d" % rng.randrange(KEYS)
        value = b"%d!" % i if i % 100 == 7 else b"%d" % i
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(WAIT) == 0
    return where


def test_a_backfill_handles_each_record_once_in_key_order(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = new_topic(PARTITIONS, prefix="backfill")
    dlq = new_topic(2, prefix="backfill-dlq")
    produced = _produce(kafka_bootstrap, topic)
    records = read_topic(spark, kafka_bootstrap, topic)
    result = reprocess(records, LoggingHandler(tmp_path), bootstrap=kafka_bootstrap,
                       dlq_topic=dlq, group="backfill", partitions=4)  # fmt: skip

    logs = [log.read_text().splitlines() for log in tmp_path.glob("*.log")]
    calls = [line.split() for lines in logs for line in lines]
    assert len(calls) == RECORDS, "every record handled exactly once"
    assert {(int(p), int(o)) for _, o, p, _ in calls} == set(produced)
    offsets: dict[str, list[tuple[int, int]]] = defaultdict(list)
    tasks: dict[str, set[str]] = defaultdict(set)
    null_tasks: set[str] = set()
    for key, offset, partition, task in calls:  # in call order, per worker log
        if key == "-":
            null_tasks.add(task)
            continue
        offsets[key].append((int(partition), int(offset)))
        tasks[key].add(task)
    assert len(offsets) >= 100
    for key, seen in offsets.items():
        assert seen == sorted(seen) and len(set(seen)) == len(seen), f"{key}: out of order"
        assert len(tasks[key]) == 1, f"{key} was split over tasks {tasks[key]}"
    assert len(null_tasks) > 1, "null keys are independent records, spread over tasks"

    rows = result.rows.collect()
    assert len(rows) == RECORDS and result.handled == RECORDS
    errors = [r for r in rows if r["status"] == "error"]
    assert len(errors) == RECORDS // 100 == result.failed
    assert {r["error_class"] for r in errors} == {"tests.spark.handlers.Refused"}
    assert all(r["dead_lettered"] and r["error_message"].startswith("refusing") for r in errors)
    assert all(r["status"] == "ok" and r["duration_ms"] >= 0 for r in rows if r not in errors)

    letters = read_all(kafka_bootstrap, dlq, 2)
    assert sorted((int(header(m, DlqHeader.SOURCE_PARTITION) or -1),
                   int(header(m, DlqHeader.SOURCE_OFFSET) or -1)) for m in letters) == sorted(
        (r["partition"], r["offset"]) for r in errors)  # fmt: skip
    assert all(header(m, DlqHeader.ERROR_CLASS) == b"tests.spark.handlers.Refused"
               and header(m, DlqHeader.GROUP) == b"backfill" for m in letters)  # fmt: skip
    assert all(m.partition() == int(header(m, DlqHeader.SOURCE_PARTITION) or -1) % 2
               for m in letters)  # fmt: skip


def test_the_cli_runs_a_module_handler_and_reports_failures(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = new_topic(1, prefix="cli-backfill")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(40):
        producer.produce(topic, key=b"k%d" % (i % 4), value=b"%d" % i)
    assert producer.flush(WAIT) == 0
    report = tmp_path / "results.parquet"
    done = CliRunner().invoke(cli, [
        "reprocess", "-b", kafka_bootstrap, "-t", topic, "--from", "10", "--to", "30",
        "--handler", "tests.spark.handlers:refuse_odd", "--no-progress", "--report", str(report),
    ])  # fmt: skip
    assert done.exit_code == 3, done.output  # failures that went to no DLQ
    said = " ".join(done.output.split())
    assert "20 records handled, 10 failed" in said
    rows = spark.read.parquet(str(report)).collect()
    assert sorted(r["offset"] for r in rows) == list(range(10, 30))
    assert {r["status"] for r in rows if r["offset"] % 2} == {"error"}
