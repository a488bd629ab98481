"""What a DLQ replay would do with each dead letter, decided per whole key.

Why whole keys: a parked key's DLQ tail is the poison record followed by every later record of
the key (reason ``parked``, no error class of their own). Filtering record by record would
split that tail (``--where error=...`` would keep the head and drop the rest), and the key
would come back out of order. So every decision is taken on the key's **first** dead letter in
source order and applies to all of its records.

Outcomes, one per record (the first that applies):

``corrupt``        its provenance headers are missing or unparsable (see ``problem``)
``key_corrupt``    another record of its key is corrupt: the key cannot be put back in order
``duplicate``      the same source record (same key and source coordinates) was dead-lettered
                   earlier (a redelivery): kept once
``filtered``       the key's first dead letter does not match the ``where`` filter
``head_missing``   the key's first dead letter in range is a parked tail record: its poison
                   record lies before the range, and replaying the tail alone would reorder
``parked``         the key is still parked in its group (release it first, or ``--release``)
``replay``         to be written back to its source partition
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from keyshared.spark.source import parse_position

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["OUTCOMES", "ParkedKey", "ReplayFilter", "key_group", "plan_replay"]

OUTCOMES = ("corrupt", "key_corrupt", "duplicate", "filtered", "head_missing", "parked", "replay")


@dataclass(frozen=True)
class ParkedKey:
    """A key held by a group's key-state topic (``keyshared.kafka.keystate``)."""

    group: str
    topic: str
    partition: int
    key: bytes | None


@dataclass(frozen=True)
class ReplayFilter:
    """Which keys to replay, judged on each key's first dead letter.

    Values of one field are alternatives (any may match); different fields must all match.

    :param keys: globs (``*``, ``?``, ``[...]``) on the key as UTF-8 text.
    :param error_classes: globs on the module-qualified error class, e.g. ``*TimeoutError``.
    :param source_partitions: source partitions.
    :param failed_since: epoch ms; the key's first record was dead-lettered at or after it.
    :param failed_until: epoch ms; ... before it.
    """

    keys: tuple[str, ...] = ()
    error_classes: tuple[str, ...] = ()
    source_partitions: tuple[int, ...] = ()
    failed_since: int | None = None
    failed_until: int | None = None

    @classmethod
    def parse(cls, where: Iterable[str]) -> ReplayFilter:
        """From ``--where`` terms: ``key=GLOB``, ``error=GLOB``, ``partition=N[,N...]``,
        ``since=TIME``, ``until=TIME`` (TIME: ISO-8601 or ``@<epoch-ms>``).

        :raises ValueError: a term of another shape (the message names ``--where``).
        """
        keys: list[str] = []
        errors: list[str] = []
        partitions: list[int] = []
        since: int | None = None
        until: int | None = None
        for term in where:
            name, sep, value = term.partition("=")
            name = name.strip().lower()
            if not sep or not value:
                raise ValueError(f"--where {term!r}: expected NAME=VALUE")
            if name == "key":
                keys.append(value)
            elif name in ("error", "error_class"):
                errors.append(value)
            elif name in ("partition", "source_partition"):
                try:
                    partitions += [int(p) for p in value.split(",")]
                except ValueError:
                    raise ValueError(f"--where {term!r}: partitions are integers") from None
            elif name in ("since", "until"):
                at = parse_position(value, "earliest", f"--where {name}")
                if at.kind != "time":
                    raise ValueError(f"--where {term!r}: expected an ISO-8601 time or @<ms>")
                since, until = (at.value, until) if name == "since" else (since, at.value)
            else:
                raise ValueError(
                    f"--where {term!r}: unknown field {name!r} "
                    "(known: key, error, partition, since, until)"
                )
        return cls(tuple(keys), tuple(errors), tuple(partitions), since, until)

    def condition(self, prefix: str = "head_") -> Column:
        """A boolean column over the ``head_*`` columns of :func:`plan_replay`."""
        from pyspark.sql import functions as F

        cond = F.lit(True)
        if self.keys:
            text = F.col(f"{prefix}key").cast("string")
            cond = cond & _any_glob(text, self.keys)
        if self.error_classes:
            cond = cond & _any_glob(F.col(f"{prefix}error_class"), self.error_classes)
        if self.source_partitions:
            cond = cond & F.col(f"{prefix}source_partition").isin(list(self.source_partitions))
        if self.failed_since is not None:
            cond = cond & (F.col(f"{prefix}failed_at") >= F.lit(self.failed_since))
        if self.failed_until is not None:
            cond = cond & (F.col(f"{prefix}failed_at") < F.lit(self.failed_until))
        return F.coalesce(cond, F.lit(False))


def _any_glob(column: Column, globs: Sequence[str]) -> Column:
    from pyspark.sql import functions as F

    matches = [column.rlike("^" + fnmatch.translate(glob)) for glob in globs]
    out = matches[0]
    for match in matches[1:]:
        out = out | match
    return F.coalesce(out, F.lit(False))


def key_group() -> Column:
    """The ordering group of a record: its key. A null key is a group of its own source record:
    null keys are unordered, so each record is independent and they spread over tasks, while
    the redeliveries of one source record (several dead letters) share the group, where the
    deduplication finds them. A corrupt null-key record (no usable source coordinates) is a
    group of its own dead letter."""
    from pyspark.sql import functions as F

    is_null = F.col("key").isNull()
    alone = is_null & F.col("problem").isNotNull()
    by_source = is_null & F.col("problem").isNull()
    return F.struct(
        is_null.alias("null_key"),
        F.coalesce(F.col("key"), F.lit(b"")).alias("key"),
        F.when(by_source, F.col("source_topic")).alias("source_topic"),
        F.when(by_source, F.col("source_partition")).alias("source_partition"),
        F.when(by_source, F.col("source_offset")).alias("source_offset"),
        F.when(alone, F.col("dlq_partition")).alias("dlq_partition"),
        F.when(alone, F.col("dlq_offset")).alias("dlq_offset"),
    )


def plan_replay(
    decoded: DataFrame,
    where: ReplayFilter | None = None,
    *,
    parked: Iterable[ParkedKey] = (),
    to_topic: str | None = None,
) -> DataFrame:
    """Decide the outcome of every dead letter of ``decoded`` (see
    :func:`keyshared.spark.headers.decode_provenance`); adds ``key_group``, ``head_*``,
    ``target_topic``, ``target_partition`` and ``outcome``. Writes nothing.

    :param where: which keys to replay (default: all).
    :param parked: keys still parked; their records get ``parked`` (see
        :func:`keyshared.spark.parked.parked_keys`).
    :param to_topic: write to this topic instead of each record's source topic (same
        partition number).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # One window, so one shuffle and one sort of every dead letter: a key's records in source
    # order, a source record's copies next to each other in DLQ order. A copy whose previous row
    # is the same source record is a redelivery (the earliest copy is kept).
    source = ("source_topic", "source_partition", "source_offset")
    order = [F.col(c).asc_nulls_last() for c in (*source, "dlq_partition", "dlq_offset")]
    by_key = Window.partitionBy("key_group").orderBy(*order)
    whole_key = by_key.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    df = decoded.withColumn("key_group", key_group())
    for column in ("key", "source_partition", "error_class", "failed_at", "reason"):
        df = df.withColumn(f"head_{column}", F.first(column).over(whole_key))
    same_as_previous = F.lit(True)
    for column in source:
        same_as_previous = same_as_previous & (F.lag(column).over(by_key) == F.col(column))
    df = df.withColumn(
        "key_has_problem", F.max(F.col("problem").isNotNull().cast("int")).over(whole_key) > 0
    ).withColumn(
        "redelivery", F.col("problem").isNull() & F.coalesce(same_as_previous, F.lit(False))
    )
    parked_rows = [(k.topic, k.partition, k.key) for k in parked]
    if parked_rows:
        held = (
            decoded.sparkSession.createDataFrame(
                parked_rows, "p_topic string, p_partition int, p_key binary"
            )
            .dropDuplicates()
            .withColumn("is_parked", F.lit(True))
        )
        df = df.join(
            F.broadcast(held),
            (df["source_topic"] == held["p_topic"])
            & (df["source_partition"] == held["p_partition"])
            & df["key"].eqNullSafe(held["p_key"]),
            "left",
        ).drop("p_topic", "p_partition", "p_key")
    else:
        df = df.withColumn("is_parked", F.lit(False))
    accepted = (where or ReplayFilter()).condition()
    outcome = (
        F.when(F.col("problem").isNotNull(), "corrupt")
        .when(F.col("key_has_problem"), "key_corrupt")
        .when(F.col("redelivery"), "duplicate")
        .when(~accepted, "filtered")
        .when(F.col("key").isNotNull() & (F.col("head_reason") == "parked"), "head_missing")
        .when(F.coalesce(F.col("is_parked"), F.lit(False)), "parked")
        .otherwise("replay")
    )
    target = F.lit(to_topic) if to_topic else F.col("source_topic")
    return (
        df.withColumn("outcome", outcome)
        .withColumn("target_topic", target)
        .withColumn("target_partition", F.col("source_partition"))
        .drop("key_has_problem", "redelivery", "is_parked")
    )
