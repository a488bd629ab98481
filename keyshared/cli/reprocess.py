"""`keyshared reprocess`: run a handler over a topic range on Spark, per key in offset order.

Also home of the options every Spark command shares (`spark_options`, `open_session`), so
`keyshared dlq replay` takes them the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console

from keyshared.cli.options import (
    bootstrap_servers_option,
    client_properties_option,
    parse_properties,
    timeout_option,
    topic_option,
)
from keyshared.errors import KeySharedError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SparkCommand", "open_session", "reprocess", "spark_options"]

_F = TypeVar("_F", bound=Callable[..., Any])


def spark_options(command: _F) -> _F:
    """The options of every Spark command: broker, Spark master, jars, parallelism, report."""
    options = [
        bootstrap_servers_option(help="Kafka bootstrap servers [env KEYSHARED_BOOTSTRAP_SERVERS]."),
        click.option("--master", default="local[*]", show_default=True,
                     help="Spark master URL: local[N], spark://host:7077, yarn, k8s://..."),
        click.option("--spark-jars", envvar="KEYSHARED_SPARK_JARS",
                     help="Comma-separated jars or folders with Spark's Kafka source "
                     "[env KEYSHARED_SPARK_JARS; default: fetched once with mvn]."),
        click.option("--partitions", type=click.IntRange(min=1),
                     help="Spark tasks working in parallel (keys are spread over them) "
                     "[default: 4 per core of a local master, else spark.sql.shuffle.partitions]."),
        click.option("--report", type=click.Path(path_type=Path),
                     help="Write one row per record here: Parquet (a folder or *.parquet) "
                     "or CSV (*.csv)."),
        timeout_option(minimum=1.0, help="Seconds the broker may take to answer."),
        click.option("--conf", "spark_conf", multiple=True, metavar="NAME=VALUE",
                     help="Extra Spark property (repeatable)."),
        client_properties_option(
            help="Extra Kafka client property, e.g. for security (repeatable); also given to "
            "Spark's Kafka source as kafka.NAME."),
        click.option("--no-progress", is_flag=True, help="No progress bar (logs, CI)."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


class SparkCommand:
    """The shared options, parsed: the session is created on demand (JVM start is slow)."""

    def __init__(self, **options: Any) -> None:
        self.bootstrap: str = options["bootstrap_servers"]
        self.master: str = options["master"]
        self.jars: str | None = options["spark_jars"]
        self.partitions: int | None = options["partitions"]
        self.report: Path | None = options["report"]
        self.timeout: float = options["timeout"]
        self.spark_conf = parse_properties(options["spark_conf"])
        self.client = parse_properties(options["properties"])
        self.progress = not options["no_progress"]
        self.console = Console(stderr=True, highlight=False)

    def session(self, app_name: str) -> SparkSession:
        return open_session(self, app_name)

    def tasks(self, spark: SparkSession) -> int:
        """Tasks per job: ``--partitions``, else 4 per local core, else Spark's setting."""
        if self.partitions:
            return self.partitions
        if self.master.startswith("local"):
            return max(2, spark.sparkContext.defaultParallelism * 4)
        return int(spark.conf.get("spark.sql.shuffle.partitions") or "200")


def open_session(cmd: SparkCommand, app_name: str) -> SparkSession:
    """A session for ``cmd``, or a one-line error that says what to install or give."""
    try:
        from keyshared.spark import spark_session
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise click.ClickException(f"{exc}; install keyshared[spark]") from None
    with cmd.console.status(f"Starting Spark ({cmd.master}) ..."):
        try:
            return spark_session(cmd.master, app_name=app_name, jars=cmd.jars,
                                 conf=cmd.spark_conf)  # fmt: skip
        except ImportError as exc:
            raise click.ClickException(f"{exc}; install keyshared[spark]") from None
        except KeySharedError as exc:
            raise click.ClickException(str(exc)) from None


def job_errors(fn: _F) -> _F:
    """Turn keyshared's errors (and bad option values) into one-line CLI errors."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KeySharedError as exc:
            raise click.ClickException(str(exc)) from None
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None

    return wrapper  # type: ignore[return-value]


@click.command()
@topic_option("Topic to reprocess.")
@click.option("--from", "start", help="First record: offset, ISO-8601 time, @epoch-ms, "
              "earliest.  [default: earliest]")  # fmt: skip
@click.option("--to", "end", help="End of the range (exclusive): offset, time, latest.  "
              "[default: latest]")  # fmt: skip
@click.option("--handler", required=True, metavar="MODULE:FUNC",
              help="The handler, importable from the current directory.")  # fmt: skip
@click.option("--dlq-topic", help="Dead-letter failed records here ({topic}: the source topic).")
@click.option("--group", default="keyshared-reprocess", show_default=True,
              help="Recorded as keyshared.group in dead letters.")  # fmt: skip
@click.option("--poison", type=click.Choice(["dead_letter", "park"]), default="dead_letter",
              show_default=True,
              help="park: after a failure, dead-letter the key's later records too.")  # fmt: skip
@click.option("--max-attempts", type=click.IntRange(min=1), default=1, show_default=True,
              help="Tries per record before it counts as failed.")  # fmt: skip
@spark_options
@job_errors
def reprocess(
    topic: str,
    start: str | None,
    end: str | None,
    handler: str,
    dlq_topic: str | None,
    group: str,
    poison: str,
    max_attempts: int,
    **options: Any,
) -> None:
    """Run a handler over a range of TOPIC on Spark: each key's records in offset order in
    one task, keys in parallel, a result per record, failures optionally to a DLQ.

    \b
    keyshared reprocess -t orders --from 2024-05-01T00:00:00Z --handler app:handle
    keyshared reprocess -t orders --from 1000 --to 5000 --handler app:handle \\
        --dlq-topic orders.dlq --report results.parquet
    """
    from keyshared.spark import read_topic
    from keyshared.spark import reprocess as run_reprocess
    from keyshared.spark.progress import job_progress
    from keyshared.spark.report import counts, print_counts, write_report
    from keyshared.spark.source import parse_position, resolve_range

    cmd = SparkCommand(**options)
    first = parse_position(start, "earliest", "--from")
    last = parse_position(end, "latest", "--to")
    offsets = resolve_range(cmd.bootstrap, topic, first, last, cmd.client, cmd.timeout)
    spark = cmd.session("keyshared reprocess")
    records = read_topic(spark, cmd.bootstrap, topic, first, last, client_config=cmd.client,
                         kafka_options=cmd.client, timeout=cmd.timeout)  # fmt: skip
    handled = spark.sparkContext.accumulator(0)
    label = f"reprocess {topic}"
    with job_progress(spark, cmd.console, label, offsets.total, handled, cmd.progress):
        result = run_reprocess(
            records, handler, bootstrap=cmd.bootstrap, dlq_topic=dlq_topic, group=group,
            poison=poison, max_attempts=max_attempts, partitions=cmd.tasks(spark),
            client_config=cmd.client, handled=handled, timeout=cmd.timeout,
        )  # fmt: skip
    out = Console(highlight=False)
    print_counts(out, "Records by status", counts(result.rows, "status"), "status")
    if result.failed:
        failed = result.rows.filter("status = 'error'")
        print_counts(out, "Failures by error class", counts(failed, "error_class", 10), "error")
    if cmd.report is not None:
        kind = write_report(result.rows, cmd.report)
        cmd.console.print(f"Report ({kind}): {cmd.report}")
    rate = result.handled / result.seconds if result.seconds > 0 else 0.0
    dead = result.rows.filter("dead_lettered").count() if dlq_topic else 0
    out.print(
        f"Run {result.run_id}: {result.handled:,} records handled, {result.failed:,} failed"
        + (f", {dead:,} dead-lettered to {dlq_topic}" if dlq_topic else "")
        + f" in {result.seconds:.1f}s ({rate:,.0f} records/s)"
    )
    if result.failed and not dlq_topic:
        raise SystemExit(3)  # failures that went nowhere: let scripts notice
