"""Reading a bounded range of a topic with Spark's Kafka source, resolved on the driver first.

Why resolve offsets on the driver: ``--from``/``--to`` accept offsets and timestamps, and the
job must read one fixed range, so that a retried task reads exactly the records its first
attempt read. Resolving timestamps and ``latest`` to concrete offsets before the job starts
(confluent-kafka's ``offsets_for_times`` and watermarks) gives Spark explicit
``startingOffsets``/``endingOffsets`` JSON, and lets the driver fail fast and clearly on a
missing topic, an unreachable broker or an empty range, before any Spark work is planned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from keyshared.spark.errors import BrokerUnreachableError, EmptyRangeError, TopicNotFoundError
from keyshared.spark.kafka_options import java_kafka_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "OffsetRange",
    "Position",
    "parse_position",
    "partition_count",
    "read_range",
    "resolve_range",
]

DEFAULT_TIMEOUT_S = 15.0  # how long the broker may take to answer before the job gives up


@dataclass(frozen=True)
class Position:
    """One end of a range: ``earliest``, ``latest``, an offset, or a time (epoch ms)."""

    kind: str  # "earliest" | "latest" | "offset" | "time"
    value: int = 0

    def __str__(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "offset":
            return f"offset {self.value}"
        return datetime.fromtimestamp(self.value / 1000, UTC).isoformat()


def parse_position(text: str | int | None, default: str, option: str = "--from") -> Position:
    """Parse ``earliest``, ``latest``, an offset (``1200``), an ISO-8601 time
    (``2024-05-01T12:00:00Z``; no zone means UTC) or ``@<epoch-ms>``.

    :raises ValueError: ``text`` is none of these (the message names ``option``).
    """
    if text is None or text == "":
        return Position(default)
    if isinstance(text, int):
        return Position("offset", text)
    raw = text.strip()
    if raw in ("earliest", "latest"):
        return Position(raw)
    if raw.isdigit():
        return Position("offset", int(raw))
    if raw.startswith("@") and raw[1:].isdigit():
        return Position("time", int(raw[1:]))
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{option} {text!r}: expected earliest, latest, an offset, an ISO-8601 time "
            "or @<epoch-ms>"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return Position("time", int(moment.timestamp() * 1000))


@dataclass(frozen=True)
class OffsetRange:
    """Concrete offsets of a topic to read: ``starts[p] <= offset < ends[p]`` per partition."""

    topic: str
    starts: dict[int, int]
    ends: dict[int, int]

    @property
    def partitions(self) -> list[int]:
        """The partitions that hold at least one offset of the range."""
        return sorted(p for p in self.starts if self.ends[p] > self.starts[p])

    @property
    def total(self) -> int:
        """Offsets in the range: an upper bound of its records (transaction markers and
        compacted records take offsets too)."""
        return sum(max(0, self.ends[p] - self.starts[p]) for p in self.starts)

    def spark_options(self) -> dict[str, str]:
        """``assign``/``startingOffsets``/``endingOffsets`` for Spark's Kafka source."""
        parts = self.partitions
        return {
            "assign": json.dumps({self.topic: parts}),
            "startingOffsets": json.dumps({self.topic: {str(p): self.starts[p] for p in parts}}),
            "endingOffsets": json.dumps({self.topic: {str(p): self.ends[p] for p in parts}}),
        }


def _probe(bootstrap: str, client_config: Mapping[str, Any] | None) -> Any:
    return Consumer({
        **(client_config or {}),
        "bootstrap.servers": bootstrap,
        "group.id": "keyshared-spark-probe",  # required by the client; never joined
        "enable.auto.commit": False,
    })  # fmt: skip


def partition_count(
    bootstrap: str,
    topic: str,
    client_config: Mapping[str, Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    option: str = "--topic",
) -> int:
    """The number of partitions of ``topic``.

    :raises BrokerUnreachableError: no answer within ``timeout`` seconds.
    :raises TopicNotFoundError: the topic does not exist (the message names ``option``).
    """
    consumer = _probe(bootstrap, client_config)
    try:
        return len(_partitions(consumer, bootstrap, topic, timeout, option))
    finally:
        consumer.close()


def _partitions(
    consumer: Any, bootstrap: str, topic: str, timeout: float, option: str
) -> list[int]:
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise BrokerUnreachableError(
            f"Kafka at {bootstrap} did not answer within {timeout:.0f}s "
            f"(--bootstrap-servers): {exc.args[0] if exc.args else exc}"
        ) from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        why = found.error.str() if found is not None and found.error is not None else "no metadata"
        raise TopicNotFoundError(f"topic {topic!r} ({option}) does not exist on {bootstrap}: {why}")
    return sorted(found.partitions)


def resolve_range(
    bootstrap: str,
    topic: str,
    start: Position,
    end: Position,
    client_config: Mapping[str, Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    option: str = "--topic",
) -> OffsetRange:
    """Turn ``start``/``end`` into concrete offsets per partition (``end`` exclusive; a time
    selects records whose timestamp is ``>= start`` and ``< end``).

    :raises BrokerUnreachableError, TopicNotFoundError: see :func:`partition_count`.
    :raises EmptyRangeError: no partition has an offset in the range.
    """
    consumer = _probe(bootstrap, client_config)
    try:
        parts = _partitions(consumer, bootstrap, topic, timeout, option)
        marks: dict[int, tuple[int, int]] = {}
        for p in parts:
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=timeout, cached=False
                )
            except KafkaException as exc:
                raise BrokerUnreachableError(
                    f"reading the offsets of {topic}[{p}] failed within {timeout:.0f}s: {exc}"
                ) from None
            marks[p] = (int(low), int(high))
        starts = _offsets(consumer, topic, start, marks, timeout)
        ends = _offsets(consumer, topic, end, marks, timeout)
    finally:
        consumer.close()
    found = OffsetRange(topic, starts, ends)
    if found.total == 0:
        shown = ", ".join(f"[{p}] {lo}..{hi}" for p, (lo, hi) in sorted(marks.items()))
        raise EmptyRangeError(
            f"the range --from {start} --to {end} of topic {topic!r} holds no record "
            f"(offsets per partition: {shown})"
        )
    return found


def _offsets(
    consumer: Any, topic: str, at: Position, marks: dict[int, tuple[int, int]], timeout: float
) -> dict[int, int]:
    if at.kind == "earliest":
        return {p: lo for p, (lo, _) in marks.items()}
    if at.kind == "latest":
        return {p: hi for p, (_, hi) in marks.items()}
    if at.kind == "offset":
        return {p: min(max(at.value, lo), hi) for p, (lo, hi) in marks.items()}
    query = [TopicPartition(topic, p, at.value) for p in sorted(marks)]
    try:
        answers = consumer.offsets_for_times(query, timeout=timeout)
    except KafkaException as exc:
        raise BrokerUnreachableError(
            f"looking up offsets by time in {topic!r} failed: {exc}"
        ) from None
    found: dict[int, int] = {}
    for tp in answers:
        if tp.error is not None and tp.error.code() != KafkaError.NO_ERROR:
            raise BrokerUnreachableError(f"offset by time of {topic}[{tp.partition}]: {tp.error}")
        lo, hi = marks[tp.partition]
        found[tp.partition] = hi if tp.offset < 0 else min(max(tp.offset, lo), hi)
    return found


_TASKS_PER_CORE = 3  # Kafka partitions split so that uneven ones even out over the cores
_POLL_RECORDS = "5000"  # the Java client's max.poll.records (500 by default): fewer round trips


def read_range(
    spark: SparkSession,
    bootstrap: str,
    offsets: OffsetRange,
    kafka_options: Mapping[str, str] | None = None,
    *,
    split: bool = False,
) -> DataFrame:
    """The records of ``offsets`` as a DataFrame of Spark's Kafka source (``key``, ``value``,
    ``topic``, ``partition``, ``offset``, ``timestamp``, ``timestampType``, ``headers``).

    Reads ``read_committed``: records of aborted transactions (such as a failed replay task's)
    are never seen. ``kafka_options`` are the librdkafka client properties of the job
    (security, for example), translated for the Java client (:func:`java_kafka_options`) and
    passed as ``kafka.<name>``; ``max.poll.records`` is 5,000 unless they set it (the Java
    client's default, 500, means ten times the polls).

    :param split: read a Kafka partition in several tasks (``minPartitions``: three per core),
        so that a few partitions do not leave cores idle (three partitions on two cores read
        in two waves). Only for jobs that do not rely on a task holding a whole partition in
        order: the replay's plan sorts every key by source offset itself.
    """
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.isolation.level", "read_committed")
        .option("kafka.max.poll.records", _POLL_RECORDS)
        .option("includeHeaders", "true")
    )
    if split:
        cores = spark.sparkContext.defaultParallelism
        reader = reader.option("minPartitions", str(_TASKS_PER_CORE * cores))
    for name, value in offsets.spark_options().items():
        reader = reader.option(name, value)
    for name, value in java_kafka_options(kafka_options or {}).items():
        reader = reader.option(f"kafka.{name}", value)
    return reader.load()
