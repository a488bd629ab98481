"""keyshared's provenance headers as DataFrame columns, decoded by Spark SQL itself.

Why SQL expressions and not a Python UDF: decoding runs on every DLQ record, and native
expressions keep it in the JVM (no Python worker, no serialization) at Spark's full speed.
Why no lambdas (``filter`` and other higher-order functions): Spark does not compile them,
it interprets them element by element, and ten of them per record cost more than reading the
records from Kafka. A header is found with ``array_position`` over the header names instead,
which Spark compiles. ``user_headers`` keeps a lambda (no compiled function removes array
elements by a condition); the replay filters them in its Python writer instead, where each
record is touched anyway.

Rules, the same as ``keyshared.Record.header``: the **last** occurrence of a header wins (a record
dead-lettered twice carries two sets, the newer last). A record whose source topic, partition or
offset is missing or unparsable gets a ``problem`` text instead of failing the job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from keyshared.kafka.dlq_headers import DlqHeader

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["PROVENANCE_PREFIX", "decode_provenance", "last_header", "without_provenance"]

PROVENANCE_PREFIX = "keyshared."  # every header keyshared adds (provenance and replay ones)


def last_header(name: str) -> Column:
    """The value (binary) of the last header ``name`` of the ``headers`` column, or null."""
    from pyspark.sql import functions as F

    # 1-based position of the last occurrence, counted from the end; 0 when there is none
    from_end = F.array_position(F.reverse(F.col("headers")["key"]), F.lit(name)).cast("int")
    return F.when(from_end > 0, F.element_at(F.col("headers"), -from_end)["value"])


def without_provenance() -> Column:
    """The ``headers`` column without keyshared's own (``keyshared.*``): the user's headers,
    in their original order, as they were on the source record."""
    from pyspark.sql import functions as F

    return F.filter(
        F.coalesce(F.col("headers"), F.array()),
        lambda h: ~h["key"].startswith(PROVENANCE_PREFIX),
    )


def decode_provenance(dlq: DataFrame) -> DataFrame:
    """Add the decoded provenance of each dead letter to a DataFrame of Spark's Kafka source.

    Adds ``source_topic``, ``source_partition``, ``source_offset``, ``source_timestamp`` (ms),
    ``group``, ``reason``, ``error_class``, ``error_message``, ``attempts``, ``failed_at``
    (ms of the dead letter), ``user_headers`` and ``problem`` (null when the record is sound).
    The Kafka columns are renamed ``dlq_topic``, ``dlq_partition``, ``dlq_offset``.
    """
    from pyspark.sql import functions as F

    def text(name: str) -> Column:
        return last_header(name).cast("string")

    def number(name: str, kind: str) -> Column:
        return F.nullif(F.trim(text(name)), F.lit("")).try_cast(kind)

    out = (
        dlq.withColumnRenamed("topic", "dlq_topic")
        .withColumnRenamed("partition", "dlq_partition")
        .withColumnRenamed("offset", "dlq_offset")
        .withColumn("headers", F.coalesce(F.col("headers"), F.array()))
        .withColumn("source_topic", F.nullif(text(DlqHeader.SOURCE_TOPIC), F.lit("")))
        .withColumn("source_partition", number(DlqHeader.SOURCE_PARTITION, "int"))
        .withColumn("source_offset", number(DlqHeader.SOURCE_OFFSET, "long"))
        .withColumn("source_timestamp", number(DlqHeader.SOURCE_TIMESTAMP, "long"))
        .withColumn("group", text(DlqHeader.GROUP))
        .withColumn("reason", text(DlqHeader.REASON))
        .withColumn("error_class", F.coalesce(text(DlqHeader.ERROR_CLASS), F.lit("")))
        .withColumn("error_message", text(DlqHeader.ERROR_MESSAGE))
        .withColumn("attempts", number(DlqHeader.ATTEMPTS, "int"))
        .withColumn("failed_at", number(DlqHeader.LAST_FAILURE, "long"))
        .withColumn("user_headers", without_provenance())
    )
    problems = [
        (F.col("source_topic").isNull(), f"missing or empty {DlqHeader.SOURCE_TOPIC}"),
        (
            F.col("source_partition").isNull() | (F.col("source_partition") < 0),
            f"missing or corrupt {DlqHeader.SOURCE_PARTITION}",
        ),
        (
            F.col("source_offset").isNull() | (F.col("source_offset") < 0),
            f"missing or corrupt {DlqHeader.SOURCE_OFFSET}",
        ),
    ]
    problem = F.concat_ws("; ", *(F.when(cond, F.lit(why)) for cond, why in problems))
    return out.withColumn("problem", F.nullif(problem, F.lit("")))
