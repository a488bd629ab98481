"""`keyshared status`: where a group stands, and what holds it back, in one screen.

Why one command for broker and member facts: the broker knows the committed cursor, the end of
each partition, the members and the key-state and DLQ topics; a running member knows why its
cursor is not moving (the age of its oldest unfinished record) and which keys are hot. An
operator looking at lag needs both side by side. Reading never joins the group, so running
`status` against a live group does not cause a rebalance.

Errors (broker unreachable within ``--timeout``, unknown group, missing topic) exit 2, so a
script can tell them from a report.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from keyshared.cli.options import CommandError, broker_options, reader_for, zookeeper_option
from keyshared.errors import KeySharedError
from keyshared.ops import OpsError, StatusReport, collect_status
from keyshared.ops.coordinator_view import (
    CoordinatorView,
    read_coordinator_view,
    render_coordinator,
)
from keyshared.ops.group_status import format_ranges

__all__ = ["render_key_states", "status"]

F = TypeVar("F", bound=Callable[..., Any])


def _console() -> Console:
    # Wide enough that offset ranges and keys are not folded when the output is piped.
    return Console(highlight=False, width=None if Console().is_terminal else 160)


def status_json(status: StatusReport) -> dict[str, Any]:
    """The report as JSON-ready data: every field of :class:`StatusReport`, plus ``done``."""
    data = dataclasses.asdict(status)
    for part, raw in zip(status.partitions, data["partitions"], strict=True):
        raw["done"] = part.done
    return data


@click.command()
@broker_options
@click.option(
    "--topic",
    "-t",
    "topics",
    multiple=True,
    help="Topic to show (repeatable) [default: every topic the group committed to].",
)
@click.option(
    "--metrics-url",
    "metrics_urls",
    multiple=True,
    metavar="URL",
    help="A running member's metrics endpoint, e.g. http://host:9400/metrics "
    "(repeatable): adds its hot keys and what holds each cursor back.",
)
@zookeeper_option(
    default=None,
    help="ZooKeeper of the group's coordinator: adds key_shared slot ranges (owners, drains, "
    "where each range stands), partition leases, the active member and standbys "
    "(default: $KEYSHARED_ZOOKEEPER).",
)
def status(
    bootstrap_servers: str,
    group: str,
    dlq_topic: str,
    timeout: float,
    as_json: bool,
    properties: tuple[str, ...],
    topics: tuple[str, ...],
    metrics_urls: tuple[str, ...],
    zookeeper: str | None,
) -> None:
    """Show a consumer group's committed state, members, held keys and DLQs.

    Per partition: the committed offset (keyshared's safe cursor), the high watermark, the lag,
    how many finished offsets above the cursor the commit metadata records, and how many offsets
    are really not done yet. With --metrics-url, also what a running member is busy with.

    Example: keyshared status -g billing -t orders --metrics-url http://10.0.0.7:9400/metrics
    """
    reader = reader_for(bootstrap_servers, properties, timeout)
    try:
        report = collect_status(
            reader, group, topics, dlq_topic=dlq_topic, metrics_urls=metrics_urls
        )
    except OpsError as exc:
        raise CommandError(str(exc)) from None
    finally:
        reader.close()
    ends = {(p.topic, p.partition): p.high_watermark for p in report.partitions}
    coordination = _coordinator_section(zookeeper, group, timeout, ends)
    if as_json:
        data = status_json(report)
        if isinstance(coordination, CoordinatorView):
            data["coordinator"] = coordination.to_json()
        elif coordination is not None:
            data["coordinator"] = coordination
        click.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    console = _console()
    render_status(console, report)
    if isinstance(coordination, CoordinatorView):
        render_coordinator(console, coordination)
    elif coordination is not None:
        console.print(f"[red]Coordinator at {zookeeper}: {coordination['error']}[/]")


def _coordinator_section(
    zookeeper: str | None, group: str, timeout: float, ends: dict[tuple[str, int], int]
) -> CoordinatorView | dict[str, Any] | None:
    """The coordinator's view, or ``{"error": ...}`` when ZooKeeper did not answer: the broker's
    report stands on its own, so a coordinator outage is shown, not fatal."""
    if not zookeeper:
        return None
    try:
        return read_coordinator_view(zookeeper, group, timeout=timeout, high_watermarks=ends)
    except KeySharedError as exc:
        return {"hosts": zookeeper, "error": str(exc)}


def render_status(console: Console, report: StatusReport) -> None:
    """Every section of the report as rich tables."""
    info = report.info
    console.print(
        f"[bold]Group {report.group!r}[/]: state [bold]{info.state}[/], type {info.type}, "
        f"{len(info.members)} member(s)" + (f", assignor {info.assignor}" if info.assignor else "")
    )
    if info.members:
        table = Table("Client id", "Host", "Member id", "Assigned partitions", title="Members")
        for member in info.members:
            assigned = ", ".join(f"{t}[{p}]" for t, p in member.assignment) or "-"
            table.add_row(member.client_id, member.host, member.member_id, assigned)
        console.print(table)
    table = Table(
        "Topic",
        "Part",
        "Committed",
        "High wm",
        "Lag",
        "Finished above",
        "Not done",
        "Metadata",
        "Owner",
        title="Partitions",
    )
    for part in report.partitions:
        not_done = (
            "0"
            if not part.pending_count
            else (f"[yellow]{part.pending_count}[/] ({format_ranges(part.pending, 2)})")
        )
        if part.deleted_unconsumed:
            not_done += f" [red]{part.deleted_unconsumed} deleted unconsumed[/]"
        table.add_row(
            part.topic,
            str(part.partition),
            "-" if part.committed is None else str(part.committed),
            str(part.high_watermark),
            str(part.lag),
            str(part.finished_above_cursor),
            not_done,
            part.metadata,
            part.owner or "-",
        )
    console.print(table)
    render_key_states(console, report)
    table = Table("DLQ topic", "Source topic", "Records", title="Dead-letter topics")
    for dlq in report.dlq:
        records = str(dlq.records) if dlq.exists else "[dim]no such topic[/]"
        table.add_row(dlq.topic, dlq.source_topic, records)
    console.print(table)
    for live in report.live:
        _render_live(console, live)


def render_key_states(console: Console, report: StatusReport) -> None:
    """The parked and blocked keys, or a line saying there are none."""
    if report.key_states is None:
        console.print(f"Held keys: none (no key-state topic {report.key_state_topic!r})")
        return
    if not report.key_states:
        console.print(f"Held keys: none (in {report.key_state_topic!r})")
        return
    table = Table(
        "Topic",
        "Part",
        "Key",
        "State",
        "Offset",
        "Since",
        "Error",
        title=f"Held keys (in {report.key_state_topic!r})",
    )
    for row in report.key_states:
        key = row.get("key")
        shown = "<null>" if key is None else f"0x{key}" if row.get("key_encoding") == "hex" else key
        since = row.get("since")
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(str(since))))
        table.add_row(
            str(row.get("topic")),
            str(row.get("partition")),
            str(shown),
            str(row.get("state")),
            str(row.get("offset")),
            when,
            str(row.get("error") or ""),
        )
    console.print(table)


def _top(entries: object, unit: str = "", limit: int = 3) -> str:
    if not isinstance(entries, list) or not entries:
        return "-"
    shown = []
    for entry in entries[:limit]:
        weight = float(entry.get("weight", 0))
        amount = f"{weight:.2f}{unit}" if unit else f"{weight:g}"
        shown.append(f"{entry.get('key')} ({amount})")
    return ", ".join(shown)


def _render_live(console: Console, live: dict[str, object]) -> None:
    url = live.get("url")
    if "error" in live:
        console.print(f"[red]Member at {url} did not answer: {live['error']}[/]")
        return
    table = Table(
        "Topic",
        "Part",
        "Oldest incomplete",
        "In flight",
        "Waiting",
        "Held keys",
        "Busiest keys (records)",
        "Slowest keys (handler s)",
        title=f"Member at {url}",
    )
    parts = live.get("partitions")
    for part in parts if isinstance(parts, list) else []:
        age = part.get("oldest_incomplete_age_seconds")
        held = [*part.get("blocked", []), *part.get("parked", [])]
        table.add_row(
            str(part.get("topic")),
            str(part.get("partition")),
            "-" if age is None else f"{age:.1f}s",
            f"{part.get('in_flight', 0):g}",
            f"{part.get('waiting', 0):g}",
            ", ".join(held) or "-",
            _top(part.get("busiest")),
            _top(part.get("slowest_seconds"), "s"),
        )
    console.print(table)
    if "ready" in live:
        reasons = live.get("reasons")
        why = "; ".join(map(str, reasons)) if isinstance(reasons, list) and reasons else ""
        console.print("Ready: yes" if live["ready"] else f"[yellow]Ready: no[/] ({why})")
    holds = live.get("holds")
    if isinstance(holds, dict):
        shown = ", ".join(f"{name} ({float(age):.1f}s)" for name, age in sorted(holds.items()))
        console.print(f"Holds on dispatch: {shown or 'none'}")
    holdings = live.get("holdings")
    if isinstance(holdings, list) and "ready" in live:
        console.print(f"Holdings: {_holdings(holdings) or 'none'}")


def _holdings(holdings: list[Any]) -> str:
    """``name phase (age)`` for each lease, range or lock; ``gone`` marks one whose znode went
    (kept only while its handlers run)."""
    shown = []
    for h in holdings:
        gone = "" if h.get("alive", True) else ", gone"
        shown.append(f"{h.get('name')} {h.get('phase')} ({float(h.get('age', 0)):.1f}s{gone})")
    return ", ".join(shown)
