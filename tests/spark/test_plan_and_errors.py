"""What a replay decides per whole key, and the clear errors of a job that cannot run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from keyshared.cli import cli
from keyshared.dev.topics import TopicFactory
from keyshared.spark import ReplayFilter, parse_position, plan_replay, read_dlq
from keyshared.spark.errors import MissingJarsError
from keyshared.spark.jars import kafka_source_jars
from tests.spark.support import WAIT, write_dlq


class Timeout(Exception):
    """An error class for ``--where error=...``."""


def _dlq(bootstrap: str, dlq: str, source: str) -> None:
    write_dlq(bootstrap, dlq, source, [(0, 10, b"a", b"a1"), (0, 11, b"a", b"a2"),
                                       (0, 12, b"a", b"a3")], error=Timeout("slow"))  # fmt: skip
    write_dlq(bootstrap, dlq, source, [(1, 20, b"b", b"b1"), (1, 21, b"b", b"b2")])
    write_dlq(bootstrap, dlq, source, [(0, 30, b"d", b"d1"), (0, 30, b"d", b"d1")],
              error=Timeout("twice"))  # fmt: skip
    write_dlq(bootstrap, dlq, source, [(2, 40, None, b"n1"), (2, 41, None, b"n2")],
              error=Timeout("null"))  # fmt: skip
    write_dlq(bootstrap, dlq, source, [(2, 42, None, b"n3"), (2, 42, None, b"n3")],
              error=Timeout("null, redelivered"))  # fmt: skip
    # b1's source coordinates under another key: the topic was recreated, not b1 redelivered
    write_dlq(bootstrap, dlq, source, [(1, 20, b"g", b"g1")], error=Timeout("recreated"))
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(dlq, key=b"c", value=b"c1", headers=[
        ("keyshared.source.topic", source.encode()), ("keyshared.source.partition", b"x1"),
        ("keyshared.source.offset", b"50"), ("keyshared.source.partition", b"oops"),
    ])  # fmt: skip
    producer.produce(dlq, key=b"c", value=b"c2", headers=[
        ("keyshared.source.topic", source.encode()), ("keyshared.source.partition", b"1"),
        ("keyshared.source.offset", b"51"), ("keyshared.reason", b"parked"),
    ])  # fmt: skip
    producer.produce(dlq, key=b"e", value=b"e9", headers=[
        ("keyshared.source.topic", source.encode()), ("keyshared.source.partition", b"0"),
        ("keyshared.source.offset", b"60"), ("keyshared.reason", b"parked"),
        ("keyshared.source.offset", b"61"),  # the last occurrence wins
    ])  # fmt: skip
    producer.produce(dlq, key=b"f", value=b"f1", headers=None)
    assert producer.flush(WAIT) == 0


def test_outcomes_are_decided_on_each_whole_key(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    source, dlq = new_topic(3, prefix="src"), new_topic(1, prefix="dlq")
    _dlq(kafka_bootstrap, dlq, source)
    decoded = read_dlq(spark, kafka_bootstrap, dlq)
    cores = spark.sparkContext.defaultParallelism
    assert decoded.rdd.getNumPartitions() >= cores, "one DLQ partition is read by every core"
    plan = plan_replay(decoded, ReplayFilter.parse([f"error=*{Timeout.__name__}"]))
    rows = plan.collect()
    got = {(r["key"], r["value"]): (r["outcome"], r["source_offset"], r["problem"])
           for r in rows}  # fmt: skip
    assert [got[(b"a", v)][0] for v in (b"a1", b"a2", b"a3")] == ["replay"] * 3, "tail follows"
    assert {got[(b"b", v)][0] for v in (b"b1", b"b2")} == {"filtered"}
    assert sorted(r["outcome"] for r in rows if r["key"] == b"d") == ["duplicate", "replay"]
    assert {got[(None, v)][0] for v in (b"n1", b"n2")} == {"replay"}, "null keys: each alone"
    n3 = sorted(r["outcome"] for r in rows if r["value"] == b"n3")
    assert n3 == ["duplicate", "replay"], "a null-key record dead-lettered twice is written once"
    assert got[(b"g", b"g1")][0] == "replay", "same coordinates, another key: not a redelivery"
    assert got[(b"c", b"c1")][0] == "corrupt"
    assert "keyshared.source.partition" in got[(b"c", b"c1")][2]
    assert got[(b"c", b"c2")][0] == "key_corrupt", "a key with a corrupt record is held whole"
    assert got[(b"e", b"e9")][:2] == ("filtered", 61), "the last header occurrence wins"
    unfiltered = plan_replay(read_dlq(spark, kafka_bootstrap, dlq)).filter("key = 'e'")
    assert [r["outcome"] for r in unfiltered.collect()] == ["head_missing"], "a tail alone"
    assert got[(b"f", b"f1")][0] == "corrupt", "no headers at all"


def test_a_dry_run_reports_without_writing_and_bad_input_is_an_error(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    source, dlq = new_topic(3, prefix="src"), new_topic(1, prefix="dlq")
    _dlq(kafka_bootstrap, dlq, source)
    runner = CliRunner()
    base = ["dlq", "replay", "-b", kafka_bootstrap, "--no-progress"]
    report = tmp_path / "plan.parquet"
    dry = runner.invoke(cli, [*base, "-d", dlq, "--dry-run", "--report", str(report)])
    assert dry.exit_code == 0, dry.output
    said = " ".join(dry.output.split())
    assert "Dry run: 10 records would be replayed" in said
    rows = spark.read.parquet(str(report)).collect()
    assert sorted(r["outcome"] for r in rows).count("corrupt") == 2
    assert {r["key"] for r in rows} >= {"a", "c", None}
    assert not any(True for _ in _source_records(spark, kafka_bootstrap, source))

    empty = runner.invoke(cli, [*base, "-d", dlq, "--from", "1000"])
    assert empty.exit_code == 1 and "holds no record" in empty.output, empty.output
    missing = runner.invoke(cli, [*base, "-d", "no-such-dlq"])
    assert missing.exit_code == 1, missing.output
    assert "'no-such-dlq' (--dlq-topic) does not exist" in " ".join(missing.output.split())
    bad_where = runner.invoke(cli, [*base, "-d", dlq, "--where", "colour=red"])
    assert bad_where.exit_code == 2 and "unknown field 'colour'" in bad_where.output

    began = time.monotonic()
    down = runner.invoke(cli, ["dlq", "replay", "-b", "127.0.0.1:9", "-d", dlq, "--timeout", "2"])
    assert down.exit_code == 1 and "did not answer within 2s" in down.output, down.output
    assert time.monotonic() - began < 30


def _source_records(spark: Any, bootstrap: str, topic: str) -> list[Any]:
    from tests.spark.support import read_all

    return read_all(bootstrap, topic, 3)


def test_positions_and_filters_parse_or_name_the_option(tmp_path: Path) -> None:
    assert parse_position("1200", "earliest").value == 1200
    assert parse_position(None, "latest").kind == "latest"
    assert parse_position("@1700000000000", "earliest").value == 1_700_000_000_000
    assert parse_position("2023-11-14T22:13:20Z", "earliest").value == 1_700_000_000_000
    with pytest.raises(ValueError, match="--to 'soon'"):
        parse_position("soon", "latest", "--to")
    where = ReplayFilter.parse(["key=eu-*", "key=us-?", "partition=0,2", "since=@5"])
    assert where == ReplayFilter(("eu-*", "us-?"), (), (0, 2), 5, None)
    with pytest.raises(ValueError, match="expected NAME=VALUE"):
        ReplayFilter.parse(["key"])
    with pytest.raises(MissingJarsError, match="--spark-jars"):
        kafka_source_jars(str(tmp_path / "nowhere"))
    (tmp_path / "other.jar").write_bytes(b"")
    with pytest.raises(MissingJarsError, match="no spark-sql-kafka-0-10 jar"):
        kafka_source_jars(str(tmp_path))
