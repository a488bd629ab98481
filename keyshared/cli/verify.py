"""`keyshared verify`: has a group safely and completely consumed a topic? Exit 0, 1 or 2.

Why: after a backfill, a migration or a CI run, "lag is zero" is not the whole answer. A parked
key's later records went to the DLQ while the cursor moved on; commit metadata may hold finished
offsets above a cursor that is stuck; transaction markers make a fully consumed partition look
one behind. ``verify`` checks all of it and names what is not done:

- every partition: committed offset at the high watermark, or exactly which offset ranges are
  not done (finished offsets recorded in the commit metadata are not listed, and offsets that
  hold no visible record — transaction markers, aborted or compacted records — count as done);
- no record lost to retention before the group consumed it;
- no parked or blocked key of the topic in the group's key-state topic;
- commit metadata written by keyshared decodes;
- the group's dead letters are counted per source partition (from the DLQ provenance headers);
  they fail the check only with ``--no-dlq``.

Exit codes: 0 complete, 1 not complete (with a table of what is missing), 2 the check itself
failed (broker unreachable within ``--timeout``, topic missing, group unknown).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from keyshared.cli.options import CommandError, broker_options, reader_for, topic_option
from keyshared.cli.status import status_json
from keyshared.ops import OpsError, StatusReport, VerifyResult, collect_status, judge, probe_pending
from keyshared.ops.group_status import format_ranges

__all__ = ["verify"]

EXIT_COMPLETE, EXIT_INCOMPLETE = 0, 1


@click.command()
@broker_options
@topic_option("The topic that must be fully consumed.")
@click.option(
    "--allow-dlq/--no-dlq",
    default=True,
    show_default=True,
    help="Whether dead letters are acceptable: --no-dlq fails on any dead letter "
    "of the group (they are counted and shown either way).",
)
def verify(
    bootstrap_servers: str,
    group: str,
    dlq_topic: str,
    timeout: float,
    as_json: bool,
    properties: tuple[str, ...],
    topic: str,
    allow_dlq: bool,
) -> None:
    """Check that the group has safely and completely consumed the topic (exit 0), else exit 1.

    Complete means: committed offset at the high watermark on every partition, no parked or
    blocked key, readable commit metadata, and (with --no-dlq) no dead letter. Exit 2 when the
    check cannot be made (broker unreachable, unknown group or topic).

    Example: keyshared verify -g backfill-2024 -t orders --no-dlq --json
    """
    reader = reader_for(bootstrap_servers, properties, timeout)
    try:
        report = collect_status(
            reader,
            group,
            [topic],
            dlq_topic=dlq_topic,
            count_dead_letters=True,
            allow_unknown=True,
        )
        _refuse_unknown_group(report)
        report = probe_pending(reader, report)
    except OpsError as exc:
        raise CommandError(str(exc)) from None
    finally:
        reader.close()
    verdict = judge(report, allow_dlq=allow_dlq)
    if as_json:
        click.echo(json.dumps(verify_json(report, verdict), indent=2, sort_keys=True))
    else:
        render_verdict(
            Console(highlight=False, width=None if Console().is_terminal else 160), report, verdict
        )
    click.get_current_context().exit(EXIT_COMPLETE if verdict.complete else EXIT_INCOMPLETE)


def _refuse_unknown_group(report: StatusReport) -> None:
    """An unknown group with records to consume is far more likely a typo than a group that
    consumed nothing, so it is an error; on an empty topic any group is trivially complete."""
    has_records = any(p.high_watermark > p.low_watermark for p in report.partitions)
    never_committed = all(p.committed is None for p in report.partitions)
    if report.info.state == "dead" and never_committed and has_records:
        raise OpsError(
            f"group {report.group!r} is unknown to the cluster: no members and no committed "
            "offsets (is the name right?)"
        )


def verify_json(report: StatusReport, verdict: VerifyResult) -> dict[str, Any]:
    """The verdict and the facts behind it, for scripts."""
    data = status_json(report)
    dlq = report.dlq[0] if report.dlq else None
    return {
        "group": report.group,
        "topic": dlq.source_topic if dlq else None,
        "complete": verdict.complete,
        "problems": [dataclasses.asdict(p) for p in verdict.problems],
        "notes": verdict.notes,
        "partitions": data["partitions"],
        "key_states": data["key_states"],
        "dlq_topic": dlq.topic if dlq else None,
        "dead_letters": {str(p): n for p, n in sorted((dlq.by_source or {}).items())}
        if dlq
        else {},
        "group_state": report.info.state,
    }


def render_verdict(console: Console, report: StatusReport, verdict: VerifyResult) -> None:
    """The partition table, then the problems (if any), the notes and a one-line verdict."""
    dlq = report.dlq[0] if report.dlq else None
    dead = dlq.by_source or {} if dlq else {}
    table = Table(
        "Part",
        "Committed",
        "High wm",
        "Not done",
        "Dead letters",
        "Metadata",
        title=f"Group {report.group!r} on {dlq.source_topic if dlq else '?'}",
    )
    for part in report.partitions:
        if part.done:
            not_done = "[green]0[/]"
        else:
            not_done = f"[red]{part.pending_count + part.deleted_unconsumed}[/]"
            if part.pending:
                not_done += f" ({format_ranges(part.pending, 3)})"
        table.add_row(
            str(part.partition),
            "-" if part.committed is None else str(part.committed),
            str(part.high_watermark),
            not_done,
            str(dead.get(part.partition, 0)),
            part.metadata,
        )
    console.print(table)
    if verdict.problems:
        problems = Table("Problem", "Part", "Detail", title="Not done")
        for problem in verdict.problems:
            problems.add_row(problem.kind, str(problem.partition), problem.detail)
        console.print(problems)
    for note in verdict.notes:
        console.print(f"[dim]note:[/] {note}")
    records = sum(p.high_watermark - p.low_watermark for p in report.partitions)
    if verdict.complete:
        console.print(
            f"[green]✓ complete[/]: {len(report.partitions)} partition(s), "
            f"{records} record(s) in the log, {sum(dead.values())} dead letter(s)"
        )
    else:
        where = sorted({p.partition for p in verdict.problems})
        console.print(
            f"[red]✗ not complete[/]: {len(verdict.problems)} problem(s) on "
            f"partition(s) {', '.join(map(str, where))}"
        )
