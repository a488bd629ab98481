"""DLQ replay: dead letters back to their source partitions, in per-key source order.

How the order holds: the records to replay are repartitioned by key group (all records of a
key in one task) and sorted within each task by source (topic, partition, offset); each task
produces them in that order, with an idempotent producer, to the explicit source partition
(never a re-hash). How retries stay harmless: every task writes in one transaction of its own
(see :mod:`keyshared.spark.txn`). Provenance headers are stripped; ``keyshared.replay.*``
headers (run id, time, task, the dead letter's DLQ coordinates) are added.

Example::

    spark = spark_session()
    dlq = read_dlq(spark, bootstrap, "orders.dlq")
    plan = plan_replay(dlq, ReplayFilter.parse(["error=*Timeout*"]))
    result = replay(plan, bootstrap)          # writes; result.rows: one row per record
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from keyshared.spark.errors import BrokerUnreachableError, SparkJobError
from keyshared.spark.faults import maybe_fail
from keyshared.spark.headers import PROVENANCE_PREFIX, decode_provenance
from keyshared.spark.source import (
    DEFAULT_TIMEOUT_S,
    Position,
    parse_position,
    partition_count,
    read_range,
    resolve_range,
)
from keyshared.spark.txn import Headers, TaskTransaction, TransactionSettings

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import Accumulator
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["RESULT_SCHEMA", "ReplayResult", "read_dlq", "replay"]

RESULT_SCHEMA = (
    "dlq_partition int, dlq_offset long, key binary, source_topic string, "
    "source_partition int, source_offset long, target_topic string, target_partition int, "
    "target_offset long, task int, attempt int, outcome string"
)
_WRITE_COLUMNS = ("dlq_topic", "dlq_partition", "dlq_offset", "key", "value", "headers",
                  "source_topic", "source_partition", "source_offset", "target_topic",
                  "target_partition")  # fmt: skip


def read_dlq(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    start: Position | str | int | None = None,
    end: Position | str | int | None = None,
    *,
    client_config: Mapping[str, Any] | None = None,
    kafka_options: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> DataFrame:
    """The dead letters of ``topic`` between ``start`` and ``end`` (offsets, times, see
    :func:`keyshared.spark.source.parse_position`), with decoded provenance columns.

    :raises TopicNotFoundError, BrokerUnreachableError, EmptyRangeError: before any Spark work.
    """
    first = start if isinstance(start, Position) else parse_position(start, "earliest", "--from")
    last = end if isinstance(end, Position) else parse_position(end, "latest", "--to")
    offsets = resolve_range(bootstrap, topic, first, last, client_config, timeout, "--dlq-topic")
    return decode_provenance(read_range(spark, bootstrap, offsets, kafka_options, split=True))


@dataclass
class ReplayResult:
    """What a replay did: its run id and one row per record it wrote (materialized once, so
    using the rows never writes again)."""

    run_id: str
    started_ms: int
    rows: DataFrame
    written: int


def replay(
    plan: DataFrame,
    bootstrap: str,
    *,
    run_id: str | None = None,
    partitions: int | None = None,
    client_config: Mapping[str, Any] | None = None,
    written: Accumulator[int] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> ReplayResult:
    """Write every ``replay`` row of ``plan`` (see :func:`keyshared.spark.plan.plan_replay`)
    back to its target partition, in per-key source order, once. This is an action: it runs
    the Spark job and returns when every task has committed.

    :param run_id: names the run's transactions and headers (default: a fresh one).
    :param partitions: tasks writing in parallel (default ``spark.sql.shuffle.partitions``).
    :param client_config: confluent-kafka properties for the executors' producers.
    :param written: an accumulator that counts written records (for progress displays).
    :raises SparkJobError: a target partition is missing, or the job failed.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    run = run_id or time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    started = int(time.time() * 1000)
    # Persisted: the targets are read from it first, then it is written; the plan (a Kafka read
    # and a window over whole keys) must not be computed twice.
    todo = (
        plan.filter(F.col("outcome") == "replay")
        .select(*_WRITE_COLUMNS, "key_group")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        materialized = _write(todo, run, started, bootstrap, client_config, written, partitions,
                              timeout)  # fmt: skip
    finally:
        todo.unpersist()
    done = materialized.count()
    return ReplayResult(run, started, materialized, done)


def _write(
    todo: DataFrame,
    run: str,
    started: int,
    bootstrap: str,
    client_config: Mapping[str, Any] | None,
    written: Accumulator[int] | None,
    partitions: int | None,
    timeout: float,
) -> DataFrame:
    """Run the write job over ``todo``; returns its result rows, materialized."""
    client = {**(client_config or {}), "bootstrap.servers": bootstrap}
    pairs = todo.select("target_topic", "target_partition").distinct().collect()
    targets = [(str(r[0]), int(r[1])) for r in pairs]
    settings = TransactionSettings(
        "replay", run, client, _start_offsets(bootstrap, targets, client, timeout)
    )
    task = functools.partial(_write_task, settings=settings, started_ms=started, counter=written)
    spark = todo.sparkSession
    count = partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or "200")
    ordered = todo.repartition(count, "key_group").sortWithinPartitions(
        "source_topic", "source_partition", "source_offset"
    )
    rows = ordered.drop("key_group").mapInArrow(task, RESULT_SCHEMA)
    try:
        return rows.localCheckpoint(eager=True)
    except Exception as exc:  # Py4J / Spark errors: keep the first line, it names the cause
        raise SparkJobError(f"replay run {run} failed: {_first_line(exc)}") from exc


def _start_offsets(
    bootstrap: str, targets: list[tuple[str, int]], client: Mapping[str, Any], timeout: float
) -> dict[tuple[str, int], int]:
    """The end offset of every target partition now: where a retried task scans for its own
    earlier commit. Also proves every target partition exists."""
    counts: dict[str, int] = {}
    for topic, partition in targets:
        if topic not in counts:
            counts[topic] = partition_count(bootstrap, topic, client, timeout, "--to-topic")
        if partition >= counts[topic]:
            raise SparkJobError(
                f"target topic {topic!r} (--to-topic) has {counts[topic]} partitions, but a "
                f"record goes back to partition {partition}; records keep their source partition"
            )
    probe = Consumer({**client, "group.id": "keyshared-spark-probe", "enable.auto.commit": False})
    try:
        found: dict[tuple[str, int], int] = {}
        for topic, partition in targets:
            _low, high = probe.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout, cached=False
            )
            found[(topic, partition)] = int(high)
        return found
    except KafkaException as exc:
        raise BrokerUnreachableError(f"reading target offsets failed: {exc}") from None
    finally:
        probe.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else repr(exc)


def _write_task(
    batches: Iterator[pa.RecordBatch],
    settings: TransactionSettings,
    started_ms: int,
    counter: Accumulator[int] | None,
) -> Iterator[pa.RecordBatch]:
    """One Spark task: write its (sorted) records in one transaction, one result per record.

    Columns are read whole (one Python list each) and the result is built from the input's
    own Arrow columns: a dict per record, in and out, cost more than producing it."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    task, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx else (0, 0)
    fault = ctx.getLocalProperty("keyshared.fault") if ctx else None
    txn: TaskTransaction | None = None
    skip = False
    time_header = ("keyshared.replay.time", str(started_ms).encode())
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if txn is None:
            txn = TaskTransaction(settings, task, attempt)
            skip = txn.already_committed()
        offsets: list[int | None] = [None] * batch.num_rows
        if not skip:
            records = _records(batch, time_header)
            for i, (topic, partition, key, value, headers) in enumerate(records):
                txn.produce(topic, partition, key, value, headers,
                            functools.partial(offsets.__setitem__, i))  # fmt: skip
            txn.flush()
            maybe_fail(fault, "replay:mid", attempt)
        if counter is not None:
            counter.add(batch.num_rows)
        yield _results(batch, offsets, task, attempt, skip)
    if txn is not None and not skip:
        txn.commit()
        maybe_fail(fault, "replay:after_commit", attempt)


def _records(
    batch: pa.RecordBatch, time_header: tuple[str, bytes]
) -> Iterator[tuple[str, int, Any, Any, Headers]]:
    """``(target topic, target partition, key, value, headers)`` of each row: the user's
    headers (``keyshared.*`` dropped here rather than by a Spark lambda, see headers.py), then
    ``time_header`` and the dead letter's coordinates as ``keyshared.replay.dlq``."""
    column = batch.column
    lists = column("headers")
    bounds = lists.offsets.to_pylist()
    base = bounds[0]
    # the values the offsets point into (flatten() would drop those a null list owns)
    flat = lists.values.slice(base, bounds[-1] - base)
    names, values = flat.field("key").to_pylist(), flat.field("value").to_pylist()
    present = lists.is_valid().to_pylist() if lists.null_count else None
    dlq = zip(column("dlq_topic").to_pylist(), column("dlq_partition").to_pylist(),
              column("dlq_offset").to_pylist(), strict=True)  # fmt: skip
    targets = zip(column("target_topic").to_pylist(), column("target_partition").to_pylist(),
                  strict=True)  # fmt: skip
    rows = zip(targets, column("key").to_pylist(), column("value").to_pylist(), dlq, strict=True)
    for i, ((topic, partition), key, value, (d_topic, d_partition, d_offset)) in enumerate(rows):
        start, end = bounds[i] - base, bounds[i + 1] - base
        if present is not None and not present[i]:
            start = end
        headers: Headers = [(names[j], values[j]) for j in range(start, end)
                            if not names[j].startswith(PROVENANCE_PREFIX)]  # fmt: skip
        headers.append(time_header)
        headers.append(("keyshared.replay.dlq", f"{d_topic}/{d_partition}/{d_offset}".encode()))
        yield topic, partition, key, value, headers


_PASSED_ON = ("dlq_partition", "dlq_offset", "key", "source_topic", "source_partition",
              "source_offset", "target_topic", "target_partition")  # fmt: skip


def _results(
    batch: pa.RecordBatch, offsets: list[int | None], task: int, attempt: int, skip: bool
) -> pa.RecordBatch:
    """The result rows of a batch (see ``RESULT_SCHEMA``): its own coordinates, where each
    record landed, and who wrote it."""
    import pyarrow as pa

    schema = _arrow_schema()
    n = batch.num_rows
    passed = [batch.column(name).cast(schema.field(name).type) for name in _PASSED_ON]
    outcome = "committed_earlier" if skip else "replayed"
    made = [pa.array(offsets, pa.int64()), pa.array([task] * n, pa.int32()),
            pa.array([attempt] * n, pa.int32()), pa.array([outcome] * n, pa.string())]  # fmt: skip
    return pa.RecordBatch.from_arrays([*passed, *made], schema=schema)


@functools.cache
def _arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        ("dlq_partition", pa.int32()), ("dlq_offset", pa.int64()), ("key", pa.binary()),
        ("source_topic", pa.string()), ("source_partition", pa.int32()),
        ("source_offset", pa.int64()), ("target_topic", pa.string()),
        ("target_partition", pa.int32()), ("target_offset", pa.int64()), ("task", pa.int32()),
        ("attempt", pa.int32()), ("outcome", pa.string()),
    ])  # fmt: skip
