"""Reports of a replay or reprocess: counts for the terminal, every row for a file.

Only aggregates reach the driver (counts by outcome, by error class, the top keys), so a report
of a huge DLQ costs no driver memory; the per-record report is written by Spark itself, as
Parquet (a folder, or a path ending ``.parquet``) or CSV (a path ending ``.csv``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["REPORT_COLUMNS", "counts", "print_counts", "show_key", "write_report"]

REPORT_COLUMNS = (
    "dlq_partition", "dlq_offset", "key", "source_topic", "source_partition", "source_offset",
    "group", "reason", "error_class", "failed_at", "problem", "outcome", "target_topic",
    "target_partition",
)  # fmt: skip


def show_key(key: bytes | None) -> str:
    """A key as people read it: UTF-8 text, else hex; the null key spelled out."""
    if key is None:
        return "(null key)"
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + key.hex()


def counts(df: DataFrame, by: str, limit: int | None = None) -> list[tuple[object, int]]:
    """``(value, count)`` of column ``by``, largest first."""
    from pyspark.sql import functions as F

    ordered = df.groupBy(by).count().orderBy(F.desc("count"), F.asc(by))
    rows = ordered.limit(limit).collect() if limit else ordered.collect()
    return [(row[0], int(row[1])) for row in rows]


def print_counts(console: Console, title: str, rows: list[tuple[object, int]], what: str) -> None:
    """One two-column table: ``what`` and its record count."""
    console.print(f"[bold]{title}[/]")
    table = Table(show_edge=False)
    table.add_column(what)
    table.add_column("records", justify="right")
    for value, count in rows:
        shown = show_key(value) if isinstance(value, bytes | None) else str(value)
        table.add_row(shown or "(none)", f"{count:,}")
    console.print(table)


def write_report(df: DataFrame, path: Path) -> str:
    """Write every row of ``df`` (binary keys as text) to ``path``; returns the format used.

    :raises ValueError: ``path`` exists and is a file that is not a report of ours.
    """
    from pyspark.sql import functions as F

    out = df
    if "key" in df.columns:
        text = F.col("key").cast("string")
        out = out.withColumn(
            "key",
            F.when(F.is_valid_utf8(text), text).otherwise(
                F.concat(F.lit("0x"), F.lower(F.hex(F.col("key"))))
            ),
        )
    csv = path.suffix.lower() == ".csv"
    writer = out.coalesce(1).write.mode("overwrite")
    if csv:
        writer.option("header", "true").csv(str(path))
    else:
        writer.parquet(str(path))
    return "CSV" if csv else "Parquet"
