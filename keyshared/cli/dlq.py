"""`keyshared dlq replay`: put dead letters back on their source partitions, per key in order.

The command is a thin wrapper of :mod:`keyshared.spark`: read and decode the DLQ, decide each
whole key's outcome, check the group's parked keys, report, and (unless ``--dry-run``) write.
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from keyshared.cli.reprocess import SparkCommand, job_errors, spark_options

__all__ = ["dlq"]

_SHOWN_PARKED = 5


@click.group()
def dlq() -> None:
    """Work with keyshared's dead-letter topics."""


@dlq.command()
@click.option("--dlq-topic", "-d", required=True, help="The dead-letter topic to replay.")
@click.option("--to-topic", help="Write here instead of each record's source topic "
              "(same partition numbers).")  # fmt: skip
@click.option("--group", "-g", "groups", multiple=True,
              help="Group(s) whose parked keys to check [default: the groups named in the "
              "dead letters' keyshared.group header].")  # fmt: skip
@click.option("--where", multiple=True, metavar="FIELD=VALUE",
              help="Replay only keys whose first dead letter matches: key=GLOB, error=GLOB "
              "(qualified class), partition=N[,N], since=TIME, until=TIME. Repeatable: the "
              "same field ORs, different fields AND.")  # fmt: skip
@click.option("--from", "start", help="First DLQ record: offset, ISO-8601 time, @epoch-ms, "
              "earliest.  [default: earliest]")  # fmt: skip
@click.option("--to", "end", help="End of the DLQ range (exclusive): offset, time, latest.  "
              "[default: latest]")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Only report what would be replayed.")
@click.option("--release", is_flag=True,
              help="Release the keys to replay that are still parked, then replay.")  # fmt: skip
@spark_options
@job_errors
def replay(
    dlq_topic: str,
    to_topic: str | None,
    groups: tuple[str, ...],
    where: tuple[str, ...],
    start: str | None,
    end: str | None,
    dry_run: bool,
    release: bool,
    **options: Any,
) -> None:
    """Replay a DLQ to its source partitions in per-key source order, exactly once.

    Keys are selected whole, on their first dead letter, so a parked key's tail is never
    split. Keys still parked must be released first (keyshared release, or --release).

    \b
    keyshared dlq replay -d orders.dlq --dry-run --report plan.csv
    keyshared dlq replay -d orders.dlq --where 'error=*Timeout*' --where 'key=eu-*'
    keyshared dlq replay -d orders.dlq --from 2024-05-01T00:00:00Z --release
    """
    from keyshared.spark import (
        ParkedKeysError,
        ReplayFilter,
        parked_keys,
        plan_replay,
        read_dlq,
        release_keys,
    )
    from keyshared.spark import replay as run_replay
    from keyshared.spark.progress import job_progress
    from keyshared.spark.report import REPORT_COLUMNS, counts, print_counts, show_key, write_report
    from keyshared.spark.source import parse_position, resolve_range

    cmd = SparkCommand(**options)
    where_filter = ReplayFilter.parse(where)
    first = parse_position(start, "earliest", "--from")
    last = parse_position(end, "latest", "--to")
    resolve_range(cmd.bootstrap, dlq_topic, first, last, cmd.client, cmd.timeout, "--dlq-topic")
    spark = cmd.session("keyshared dlq replay")
    if "spark.sql.shuffle.partitions" not in cmd.spark_conf:
        # the plan's one shuffle (by key group) then has the write's partitions, and the write
        # reuses it instead of shuffling every record again
        spark.conf.set("spark.sql.shuffle.partitions", str(cmd.tasks(spark)))
    decoded = read_dlq(spark, cmd.bootstrap, dlq_topic, first, last, client_config=cmd.client,
                       kafka_options=cmd.client, timeout=cmd.timeout).cache()  # fmt: skip
    if not groups:
        named = decoded.filter("problem is null").select("group").distinct().collect()
        groups = tuple(str(row[0]) for row in named if row[0])
    with cmd.console.status("Reading parked keys ..."):
        parked = parked_keys(cmd.bootstrap, groups, cmd.client, cmd.timeout)
    plan = plan_replay(decoded, where_filter, parked=parked, to_topic=to_topic).cache()
    out = Console(highlight=False)
    by_outcome = dict(counts(plan, "outcome"))
    print_counts(out, "Dead letters by outcome", list(by_outcome.items()), "outcome")
    print_counts(out, "By error class (of each key's first dead letter)",
                 counts(plan, "head_error_class", 10), "error class")  # fmt: skip
    print_counts(out, "Top keys", counts(plan, "key", 10), "key")
    if cmd.report is not None:
        kind = write_report(plan.select(*REPORT_COLUMNS), cmd.report)
        cmd.console.print(f"Report ({kind}): {cmd.report}")
    held = plan.filter("outcome = 'parked'")
    if dry_run:
        out.print(f"Dry run: {by_outcome.get('replay', 0):,} records would be replayed"
                  + (f"; {by_outcome['parked']:,} are of keys still parked (release them, or "
                     "--release)" if by_outcome.get("parked") else "") + ".")  # fmt: skip
        return
    if by_outcome.get("replay") or by_outcome.get("parked"):
        _check_settled(cmd, plan)
    if by_outcome.get("parked"):
        columns = held.select("source_topic", "source_partition", "key").distinct()
        keys = {(r[0], int(r[1]), r[2]) for r in columns.collect()}
        to_release = [k for k in parked if (k.topic, k.partition, k.key) in keys]
        if not release:
            shown = ", ".join(f"{show_key(k.key)} of {k.topic}[{k.partition}] in {k.group!r}"
                              for k in to_release[:_SHOWN_PARKED])  # fmt: skip
            more = len(to_release) - _SHOWN_PARKED
            raise ParkedKeysError(
                f"{len(to_release)} key(s) to replay are still parked: {shown}"
                + (f" and {more} more" if more > 0 else "")
                + ". A parked key's records would go straight back to the DLQ: release them "
                "with `keyshared release`, or pass --release to release exactly these."
            )
        count = release_keys(cmd.bootstrap, to_release, cmd.client, cmd.timeout)
        cmd.console.print(f"Released {count} parked key(s).")
        plan = plan_replay(decoded, where_filter, to_topic=to_topic).cache()
        by_outcome = dict(counts(plan, "outcome"))
    todo = by_outcome.get("replay", 0)
    if todo == 0:
        out.print("Nothing to replay.")
        return
    written = spark.sparkContext.accumulator(0)
    with job_progress(spark, cmd.console, f"replay {dlq_topic}", todo, written, cmd.progress):
        result = run_replay(
            plan, cmd.bootstrap, partitions=cmd.tasks(spark), client_config=cmd.client,
            written=written, timeout=cmd.timeout,
        )  # fmt: skip
    targets = sorted({r[0] for r in result.rows.select("target_topic").distinct().collect()})
    out.print(f"Replayed {result.written:,} records to {', '.join(targets)} "
              f"(run {result.run_id}, headers keyshared.replay.*).")  # fmt: skip


def _check_settled(cmd: SparkCommand, plan: Any) -> None:
    """Refuse to replay dead letters their group has not committed past (see
    :func:`keyshared.spark.parked.unsettled_partitions`)."""
    from keyshared.spark import SparkJobError
    from keyshared.spark.parked import unsettled_partitions

    last = (
        plan.filter("outcome in ('replay', 'parked') and group is not null and group != ''")
        .groupBy("group", "source_topic", "source_partition")
        .agg({"source_offset": "max"})
        .collect()
    )
    lines = unsettled_partitions(
        cmd.bootstrap, [(r[0], r[1], int(r[2]), int(r[3])) for r in last], cmd.client, cmd.timeout
    )
    if lines:
        raise SparkJobError(
            "dead letters to replay are not settled yet (their group has not committed past "
            "them, so they would be delivered again): "
            + "; ".join(lines[:5])
            + ". Let the group's consumers catch up (or restart them so they commit), then retry."
        )
