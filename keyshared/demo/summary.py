"""The demo's closing report: what ran, how fast against a plain consumer, and the proofs.

The plain-consumer figure is an estimate, and says so: a consumer group processes each partition
serially, so with one member per partition it needs at least ``records x L / partitions``, with
``L`` the handler time the workload is configured with (a single plain consumer: ``records x L``).
The configured time, not the measured one: on a loaded machine a 5 ms sleep takes 7-10 ms, and
the measured figure would inflate the claim about twofold. The measured mean is shown beside it.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from keyshared.demo.run import DemoOutcome
from keyshared.dev.cluster import BOOTSTRAP_ENV

__all__ = ["print_summary"]

_OK, _BAD = "[green]✓[/]", "[red]✗[/]"


def print_summary(console: Console, outcome: DemoOutcome) -> None:
    s = outcome.settings
    produced = outcome.produced.acked
    rate = produced / outcome.elapsed_s if outcome.elapsed_s > 0 else 0.0
    handler_s = s.handler_ms / 1000
    serial_one = produced * handler_s
    serial_group = serial_one / s.partitions
    table = Table(title="keyshared demo: summary", title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row(
        "records",
        f"{produced:,} orders over {len(outcome.produced.per_key):,} "
        f"customers ({_count(s.partitions, 'partition')})",
    )
    table.add_row(
        "elapsed",
        f"{outcome.elapsed_s:.1f} s  ({rate:,.0f} records/s) with "
        f"{s.members} members x {s.workers} workers",
    )
    table.add_row(
        "plain consumer (estimate)",
        f"{serial_group:.1f} s with one consumer per partition, {serial_one:.0f} s with one "
        f"consumer at the configured {s.handler_ms:g} ms per call  (keyshared "
        f"{serial_group / outcome.elapsed_s:.1f}x / {serial_one / outcome.elapsed_s:.0f}x faster; "
        f"calls took {outcome.mean_handler_s * 1000:.2f} ms on average here)",
    )
    hot_key, hot_count = max(outcome.produced.per_key.items(), key=lambda item: item[1])
    table.add_row(
        "hottest key floor",
        f"{hot_key} has {hot_count} orders: {hot_count * handler_s:.1f} s in order, "
        "whatever the parallelism",
    )
    v = outcome.verdict
    table.add_row("per-key order", f"{_mark(v.violations == 0)} {v.violations} violations")
    lost = len(outcome.lost)
    table.add_row(
        "records lost",
        f"{_mark(lost == 0)} {lost} (every produced order succeeded or is in the DLQ)"
        if lost == 0
        else f"{_BAD} {lost}: {outcome.lost[:5]}",
    )
    redelivered = (
        f" ({v.redelivered} unfinished order(s) redelivered from attempt 1 after a hand-over)"
        if v.redelivered
        else ""
    )
    table.add_row("duplicates", f"{v.duplicates}{redelivered}")
    behind = sum(outcome.commit_gaps.values())
    table.add_row(
        "committed offsets",
        f"{_mark(behind == 0)} "
        + (
            "every partition committed to its end offset"
            if behind == 0
            else f"{behind} records behind the end offsets"
        ),
    )
    letters = outcome.dead_letters
    keys = sorted({letter.key for letter in letters})
    table.add_row(
        "dead letters",
        f"{len(letters)} in {outcome.dlq_topic} (expected {len(outcome.produced.poison)}), "
        f"keys: {', '.join(keys[:6])}{' ...' if len(keys) > 6 else ''}",
    )
    if outcome.timed_out:
        table.add_row("timeout", f"{_BAD} not finished within {s.timeout:.0f} s")
    console.print(table)
    for example in v.examples:
        console.print(f"  [red]order violation:[/] {example}")
    if letters:
        _print_headers(console, letters[0].key, letters[0].seq, letters[0].headers)
    _print_next(console, outcome)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _mark(ok: bool) -> str:
    return _OK if ok else _BAD


def _print_headers(console: Console, key: str, seq: int, headers: dict[str, str]) -> None:
    table = Table(title=f"headers of one dead letter ({key} order {seq})", title_justify="left")
    table.add_column("header")
    table.add_column("value", overflow="fold")
    for name, value in headers.items():
        if name != "keyshared.error.traceback":
            table.add_row(name, value)
    console.print(table)


def _print_next(console: Console, outcome: DemoOutcome) -> None:
    console.print("[bold]Where to look next[/]")
    if outcome.metrics_url:
        console.print(
            f"  metrics: {outcome.metrics_url} served while the demo ran; "
            "examples/metrics_consumer.py keeps one up for Prometheus/Grafana (grafana/)"
        )
    console.print(f"  keyshared status --group {outcome.group}   the group's members and lag")
    if outcome.settings.mode == "key_shared" and outcome.settings.zookeeper:
        console.print(
            f"  keyshared status --group {outcome.group} --zookeeper {outcome.settings.zookeeper}"
            "   slot ranges, owners and drains while members run; keyshared assign moves a "
            "range (docs/coordinator.md)"
        )
    console.print(
        f'  eval "$(keyshared dev env)"   then any command finds the cluster via {BOOTSTRAP_ENV}'
    )
    console.print("  docs/getting-started.md, examples/, keyshared bench --list")
