"""Backfill or reprocess a topic range with a handler, under keyshared's per-key contract.

The contract, as in the live consumer: all records of a key are handled by one task, in offset
order, one at a time; different keys run in parallel across tasks. Null keys are independent
records (like the live consumer's default), spread over tasks instead of forming one giant key.
Memory stays bounded for huge keys: each task streams its sorted partition batch by batch
(``mapInArrow``), never a whole key group.

Failures become result rows (``error``, with class and message) and, with ``dlq_topic``, dead
letters with the live consumer's provenance headers (``keyshared.kafka.dlq``), written in one
transaction per task like a replay (:mod:`keyshared.spark.txn`). ``poison="park"`` also
dead-letters the rest of a failed key's records (reason ``parked``), so a later
``keyshared dlq replay`` restores the key in order. A retried task handles its records again:
handler side effects are at-least-once, dead letters exactly once.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import os
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from keyshared.kafka.dlq_headers import provenance_headers
from keyshared.record import Record
from keyshared.spark.faults import maybe_fail
from keyshared.spark.replay import _first_line, _start_offsets
from keyshared.spark.source import (
    DEFAULT_TIMEOUT_S,
    Position,
    parse_position,
    partition_count,
    read_range,
    resolve_range,
)
from keyshared.spark.txn import TaskTransaction, TransactionSettings

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import Accumulator
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["REPROCESS_SCHEMA", "ReprocessResult", "read_topic", "reprocess"]

REPROCESS_SCHEMA = (
    "topic string, partition int, offset long, key binary, status string, "
    "error_class string, error_message string, attempts int, duration_ms double, "
    "task int, task_attempt int, dead_lettered boolean"
)
Handler = Callable[[Record], Any]
_READ_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
                 "headers")  # fmt: skip


def read_topic(
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
    """The records of ``topic`` from ``start`` to ``end`` (see
    :func:`keyshared.spark.source.parse_position`), as Spark's Kafka source gives them.

    :raises TopicNotFoundError, BrokerUnreachableError, EmptyRangeError: before any Spark work.
    """
    first = start if isinstance(start, Position) else parse_position(start, "earliest", "--from")
    last = end if isinstance(end, Position) else parse_position(end, "latest", "--to")
    offsets = resolve_range(bootstrap, topic, first, last, client_config, timeout, "--topic")
    return read_range(spark, bootstrap, offsets, kafka_options)


@dataclass
class ReprocessResult:
    """One row per record handled (materialized once: using it never runs handlers again)."""

    run_id: str
    rows: DataFrame
    handled: int
    failed: int
    seconds: float


@dataclass(frozen=True)
class _TaskPlan:
    handler: Handler | str
    search_path: str
    group: str
    dlq_topic: str | None
    dlq_partitions: int
    park: bool
    max_attempts: int
    txn: TransactionSettings | None


def reprocess(
    records: DataFrame,
    handler: Handler | str,
    *,
    bootstrap: str | None = None,
    dlq_topic: str | None = None,
    group: str = "keyshared-reprocess",
    poison: str = "dead_letter",
    max_attempts: int = 1,
    run_id: str | None = None,
    partitions: int | None = None,
    client_config: Mapping[str, Any] | None = None,
    handled: Accumulator[int] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> ReprocessResult:
    """Run ``handler`` on every record of ``records`` (a Kafka-source DataFrame), per key in
    offset order. This is an action: it returns when every task has finished.

    :param handler: a function taking a :class:`keyshared.Record` (plain or ``async def``),
        or ``"module:function"`` importable on the executors (the current directory is added
        to their ``sys.path``).
    :param dlq_topic: dead-letter failures here (``{topic}`` is the record's topic); needs
        ``bootstrap``. Without it failures are only result rows.
    :param group: recorded in the dead letters' ``keyshared.group`` header.
    :param poison: ``dead_letter`` (a key goes on after a failure) or ``park`` (its later
        records are dead-lettered too, in order, with reason ``parked``).
    :param max_attempts: tries per record before it counts as failed.
    :raises ValueError: a bad option (the message names it).
    :raises SparkJobError: the job failed.
    """
    from pyspark.sql import functions as F

    from keyshared.spark.errors import SparkJobError

    if poison not in ("dead_letter", "park"):
        raise ValueError(f"--poison {poison!r}: expected dead_letter or park")
    if max_attempts < 1:
        raise ValueError("--max-attempts must be at least 1")
    if isinstance(handler, str):
        _resolve(handler, os.getcwd())  # fail on the driver, with the reason, before Spark runs
    spark = records.sparkSession
    run = run_id or time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    txn: TransactionSettings | None = None
    dlq_partitions = 0
    if dlq_topic is not None:
        if bootstrap is None:
            raise ValueError("a DLQ topic (--dlq-topic) needs the bootstrap servers")
        client = {**(client_config or {}), "bootstrap.servers": bootstrap}
        topics = [r[0] for r in records.select("topic").distinct().collect()]
        names = sorted({dlq_topic.replace("{topic}", t) for t in topics})
        if len(names) > 1:
            raise ValueError(f"--dlq-topic {dlq_topic!r} names {len(names)} topics; use one")
        name = names[0] if names else dlq_topic
        dlq_partitions = partition_count(bootstrap, name, client, timeout, "--dlq-topic")
        targets = [(name, p) for p in range(dlq_partitions)]
        txn = TransactionSettings(
            "reprocess", run, client, _start_offsets(bootstrap, targets, client, timeout)
        )
        dlq_topic = name
    plan = _TaskPlan(handler, os.getcwd(), group, dlq_topic, dlq_partitions, poison == "park",
                     max_attempts, txn)  # fmt: skip
    is_null = F.col("key").isNull()
    key_group = F.struct(
        is_null.alias("null_key"),
        F.coalesce(F.col("key"), F.lit(b"")).alias("key"),
        F.when(is_null, F.col("partition")).alias("partition"),
        F.when(is_null, F.col("offset")).alias("offset"),
    )
    count = partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or "200")
    ordered = (
        records.select(*_READ_COLUMNS)
        .withColumn("timestamp_ms", F.unix_millis(F.col("timestamp")))
        .drop("timestamp")
        .repartition(count, key_group)
        .sortWithinPartitions("topic", "partition", "offset")
    )
    task = functools.partial(_handle_task, plan=plan, counter=handled)
    began = time.monotonic()
    try:
        rows = ordered.mapInArrow(task, REPROCESS_SCHEMA).localCheckpoint(eager=True)
    except Exception as exc:
        raise SparkJobError(f"reprocess run {run} failed: {_first_line(exc)}") from exc
    seconds = time.monotonic() - began
    totals = {r[0]: int(r[1]) for r in rows.groupBy("status").count().collect()}
    return ReprocessResult(run, rows, sum(totals.values()), totals.get("error", 0), seconds)


def _resolve(spec: Handler | str, search_path: str) -> Handler:
    """The handler function of ``"module:function"`` (or the callable itself).

    :raises ValueError: not of that shape, not importable, or not callable.
    """
    if not isinstance(spec, str):
        return spec
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--handler {spec!r}: expected MODULE:FUNCTION")
    if search_path not in sys.path:
        sys.path.insert(0, search_path)
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--handler {spec!r}: cannot import it: {exc}") from exc
    if not callable(target):
        raise ValueError(f"--handler {spec!r} is not callable")
    return target  # type: ignore[no-any-return]


class _Letter:
    """The ``confluent_kafka.Message`` methods ``provenance_headers`` reads, from a row."""

    def __init__(self, row: Mapping[str, Any]) -> None:
        self._row = row

    def topic(self) -> str:
        return str(self._row["topic"])

    def partition(self) -> int:
        return int(self._row["partition"])

    def offset(self) -> int:
        return int(self._row["offset"])

    def timestamp(self) -> tuple[int, int]:
        ts = self._row["timestamp_ms"]
        return (int(self._row["timestampType"]) + 1, int(ts)) if ts is not None else (0, 0)

    def headers(self) -> list[tuple[str, str | bytes | None]]:
        return [(h["key"], h["value"]) for h in self._row["headers"] or ()]


def _handle_task(
    batches: Iterator[pa.RecordBatch], plan: _TaskPlan, counter: Accumulator[int] | None
) -> Iterator[pa.RecordBatch]:
    """One Spark task: handle its records in order, one result row each."""
    import pyarrow as pa
    from pyspark import TaskContext

    ctx = TaskContext.get()
    task, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx else (0, 0)
    fault = ctx.getLocalProperty("keyshared.fault") if ctx else None
    handler = _resolve(plan.handler, plan.search_path)
    call = _caller(handler)
    txn: TaskTransaction | None = None
    skip_letters = False
    parked: set[bytes] = set()
    try:
        for batch in batches:
            out: list[dict[str, Any]] = []
            for row in batch.to_pylist():
                result = _handle(row, call, plan, parked)
                letter = result.pop("_letter", None)
                if letter is not None and plan.txn is not None:
                    if txn is None:
                        txn = TaskTransaction(plan.txn, task, attempt)
                        skip_letters = txn.already_committed()
                    if not skip_letters:
                        _dead_letter(txn, row, letter, plan)
                    result["dead_lettered"] = True
                out.append({**result, "task": task, "task_attempt": attempt})
            if txn is not None and not skip_letters:
                txn.flush()
            if counter is not None:
                counter.add(len(out))
            maybe_fail(fault, "reprocess:mid", attempt)
            yield pa.RecordBatch.from_pylist(out, schema=_arrow_schema())
        if txn is not None and not skip_letters:
            txn.commit()
    finally:
        call.close()


class _Caller:
    """Calls a plain or ``async def`` handler; an async one on this task's own event loop."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._loop = asyncio.new_event_loop() if inspect.iscoroutinefunction(handler) else None

    def __call__(self, record: Record) -> None:
        if self._loop is not None:
            self._loop.run_until_complete(self._handler(record))
        else:
            self._handler(record)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()


def _caller(handler: Handler) -> _Caller:
    return _Caller(handler)


def _handle(
    row: dict[str, Any], call: _Caller, plan: _TaskPlan, parked: set[bytes]
) -> dict[str, Any]:
    key = row["key"]
    base = {
        "topic": row["topic"], "partition": row["partition"], "offset": row["offset"],
        "key": key, "error_class": None, "error_message": None, "dead_lettered": False,
    }  # fmt: skip
    if key is not None and key in parked:
        return {**base, "status": "parked", "attempts": 0, "duration_ms": 0.0,
                "_letter": ("parked", None, "", time.time(), 0)}  # fmt: skip
    ts = row["timestamp_ms"]
    headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
    began = time.perf_counter()
    first_failure = 0.0
    error: BaseException | None = None
    trace = ""
    attempt = 0
    for attempt in range(1, plan.max_attempts + 1):
        record = Record(key=key, value=row["value"], topic=row["topic"], partition=row["partition"],
                        offset=row["offset"], headers=headers,
                        timestamp=ts / 1000.0 if ts is not None else None, attempt=attempt,
                        raw_key=key)  # fmt: skip
        try:
            call(record)
            error = None
            break
        except Exception as exc:
            error, trace = exc, traceback.format_exc()
            first_failure = first_failure or time.time()
    elapsed = (time.perf_counter() - began) * 1000
    if error is None:
        return {**base, "status": "ok", "attempts": attempt, "duration_ms": elapsed}
    if plan.park and key is not None:
        parked.add(key)
    kind = type(error)
    return {
        **base, "status": "error", "attempts": attempt, "duration_ms": elapsed,
        "error_class": ("" if kind.__module__ == "builtins" else f"{kind.__module__}.")
        + kind.__qualname__,
        "error_message": (str(error) or repr(error))[:1000],
        "_letter": ("exhausted", error, trace, first_failure, attempt),
    }  # fmt: skip


def _dead_letter(
    txn: TaskTransaction,
    row: dict[str, Any],
    letter: tuple[str, BaseException | None, str, float, int],
    plan: _TaskPlan,
) -> None:
    """Queue the dead letter of ``row`` with the live consumer's provenance headers; its DLQ
    partition is the source partition modulo the DLQ's partitions, as in the live writer."""
    reason, error, trace, first_failure, attempts = letter
    assert plan.dlq_topic is not None
    headers = provenance_headers(_Letter(row), plan.group, attempts, error, reason, trace,
                                 first_failure)  # fmt: skip
    txn.produce(plan.dlq_topic, int(row["partition"]) % plan.dlq_partitions, row["key"],
                row["value"], headers)  # fmt: skip


@functools.cache
def _arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
        ("key", pa.binary()), ("status", pa.string()), ("error_class", pa.string()),
        ("error_message", pa.string()), ("attempts", pa.int32()), ("duration_ms", pa.float64()),
        ("task", pa.int32()), ("task_attempt", pa.int32()), ("dead_lettered", pa.bool_()),
    ])  # fmt: skip
