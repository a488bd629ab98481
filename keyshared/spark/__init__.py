"""Reprocessing on Spark: replay a DLQ in per-key order, backfill a topic with a handler.

DataFrame in, DataFrame out, usable inside your own pipeline; ``keyshared dlq replay`` and
``keyshared reprocess`` are thin wrappers. Reads use Spark's own Kafka source (its jars are
fetched once into keyshared's cache, see :mod:`keyshared.spark.jars`).

One job per module:

    session.py    spark_session(): a SparkSession with the Kafka source and this interpreter
    jars.py       where the Kafka source jars come from (yours, or fetched with mvn)
    source.py     --from/--to resolved to offsets on the driver; read_range()
    headers.py    provenance headers decoded by Spark SQL (last occurrence wins)
    plan.py       ReplayFilter and plan_replay(): outcomes decided per whole key
    parked.py     parked keys of a group, and releasing them
    txn.py        one transaction per task: no duplicate, no reorder under retries
    replay.py     read_dlq() and replay()
    reprocess.py  read_topic() and reprocess(): a handler per key, in offset order
    report.py     counts by outcome, error class and key; Parquet/CSV reports
    progress.py   a rich progress display of a running job
    faults.py     the test-only hook that fails a task's first attempt

Example::

    from keyshared.spark import spark_session, read_dlq, plan_replay, replay, ReplayFilter

    spark = spark_session("local[*]")
    plan = plan_replay(read_dlq(spark, "127.0.0.1:9092", "orders.dlq"),
                       ReplayFilter.parse(["key=order-*"]))
    replay(plan, "127.0.0.1:9092")
"""

from __future__ import annotations

from keyshared.spark.errors import (
    BrokerUnreachableError,
    EmptyRangeError,
    MissingJarsError,
    ParkedKeysError,
    SparkJobError,
    TopicNotFoundError,
)
from keyshared.spark.headers import decode_provenance
from keyshared.spark.parked import parked_keys, release_keys, unsettled_partitions
from keyshared.spark.plan import OUTCOMES, ParkedKey, ReplayFilter, plan_replay
from keyshared.spark.replay import ReplayResult, read_dlq, replay
from keyshared.spark.reprocess import ReprocessResult, read_topic, reprocess
from keyshared.spark.session import spark_session
from keyshared.spark.source import OffsetRange, Position, parse_position, resolve_range

__all__ = [
    "OUTCOMES",
    "BrokerUnreachableError",
    "EmptyRangeError",
    "MissingJarsError",
    "OffsetRange",
    "ParkedKey",
    "ParkedKeysError",
    "Position",
    "ReplayFilter",
    "ReplayResult",
    "ReprocessResult",
    "SparkJobError",
    "TopicNotFoundError",
    "decode_provenance",
    "parked_keys",
    "parse_position",
    "plan_replay",
    "read_dlq",
    "read_topic",
    "release_keys",
    "replay",
    "reprocess",
    "resolve_range",
    "spark_session",
    "unsettled_partitions",
]
