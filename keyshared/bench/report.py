"""Where results go: a rich table on the terminal, one JSON file, one PNG chart per scenario.

Every rate is shown both ways, steady state first (the middle 90 % of completions, what a
long-running consumer lives at) and whole run (first start to last finish, what a backfill waits
for); every ratio likewise (``<ratio>_steady`` and ``<ratio>``; see
:meth:`~keyshared.bench.result.ScenarioResult.ratios_both`).

Charts use matplotlib's Agg backend (no display needed, so CI and ssh sessions work). The JSON
file holds every figure and ratio plus the machine, so a later run can be compared with it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from keyshared.bench.result import STEADY_SUFFIX, Goal, Measurement, ScenarioResult, steady_name

__all__ = ["machine", "print_result", "write_chart", "write_json"]


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import confluent_kafka

    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "confluent_kafka": importlib.metadata.version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.4f}"


def _steady_cell(m: Measurement) -> str:
    steady = m.steady_figure
    return "-" if steady is None else _number(steady)


def print_result(console: Console, result: ScenarioResult) -> None:
    """One table per scenario (and per shape): each contender's figures (steady state, then
    whole run), then the ratios both ways, the figures held to a goal, and, for a shaped
    scenario, one summary line per shape."""
    for nested in result.shapes.values():
        print_result(console, nested)
    if result.measurements:
        title = escape(f"{result.scenario}: {result.description}")
        table = Table(title=title, title_justify="left")
        table.add_column("contender")
        table.add_column("kind")
        table.add_column("records", justify="right")
        table.add_column("steady state", justify="right")
        table.add_column("whole run", justify="right")
        table.add_column("unit")
        for m in result.measurements:
            records = f"{m.records:,}" if m.records else "-"
            table.add_row(
                escape(m.label), m.kind, records, _steady_cell(m), _number(m.figure), m.unit
            )
        console.print(table)
    else:
        console.print(f"[bold]{escape(result.scenario)}[/]: {escape(result.description)}")
    if result.shapes:
        _print_shape_summary(console, result)
    if result.goals:
        goals = Table(show_header=True, box=None, padding=(0, 2))
        for column in ("figure", "value", "goal", "met"):
            goals.add_column(column)
        for name, goal in result.goals.items():
            mark = "[green]yes[/]" if goal.met else "[red]no[/]"
            goals.add_row(name, f"{_number(goal.value)} {goal.unit}".strip(), _goal(goal), mark)
        console.print(goals)
    ratios = Table(show_header=True, box=None, padding=(0, 2))
    ratios.add_column("ratio")
    ratios.add_column("steady state", justify="right")
    ratios.add_column("whole run", justify="right")
    for name, (steady, whole) in paired_ratios(result.ratios).items():
        ratios.add_row(name, _cell(steady), _cell(whole))
    console.print(ratios)
    for note in result.notes:
        console.print(f"  [dim]{escape(note)}[/]")


def _cell(value: float | None) -> str:
    return "-" if value is None else _number(value)


def paired_ratios(ratios: dict[str, float]) -> dict[str, tuple[float | None, float | None]]:
    """Each ratio once, by its whole-run name: (steady state, whole run), either None when
    only the other was measured; in first-recorded order."""
    paired: dict[str, tuple[float | None, float | None]] = {}
    for name in ratios:
        whole = name.removesuffix(STEADY_SUFFIX)
        if whole not in paired:
            paired[whole] = (ratios.get(steady_name(whole)), ratios.get(whole))
    return paired


def _goal(goal: Goal) -> str:
    return f"{'>=' if goal.at_least else '<='} {goal.target:g} {goal.unit}".strip()


_SUMMARY_COLUMNS = (
    "keyshared_vs_bound",
    "keyshared_cli_vs_bound",
    "keyshared_vs_thread_pool",
    "keyshared_vs_parallel_consumer",
    "keyshared_vs_pyrallel_async",
    "keyshared_vs_pyrallel_process",
)


def _print_shape_summary(console: Console, result: ScenarioResult) -> None:
    """Shapes as rows, the ratios they share as columns (each cell ``steady / whole run``):
    where a regression hides."""
    present = {n for nested in result.shapes.values() for n in nested.ratios}
    names = [n for n in _SUMMARY_COLUMNS if n in present]
    table = Table(
        title=f"{result.scenario}: ratios per shape (steady state / whole run)",
        title_justify="left",
    )
    table.add_column("shape")
    for name in names:
        table.add_column(name.removeprefix("keyshared_"), justify="right")
    for shape, nested in result.shapes.items():
        pairs = paired_ratios(nested.ratios)
        cells = [_pair(pairs.get(n, (None, None))) for n in names]
        table.add_row(shape, *cells)
    console.print(table)


def _pair(pair: tuple[float | None, float | None]) -> str:
    steady, whole = pair
    return "-" if steady is None and whole is None else f"{_cell(steady)} / {_cell(whole)}"


def write_json(path: Path, results: list[ScenarioResult], params: dict[str, Any]) -> None:
    data = {
        "machine": machine(),
        "run": params,
        "scenarios": {r.scenario: r.to_json() for r in results},
    }
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_chart(directory: Path, result: ScenarioResult) -> Path:
    """``<scenario>.png``: a horizontal bar per contender (bounds hatched), titled with the
    headline ratio; a shaped scenario gets one panel per shape, stacked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(result.shapes.values()) or [result]
    heights = [0.45 * max(1, len(p.measurements)) + 1.0 for p in panels]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(9, sum(heights) + 0.8), height_ratios=heights, squeeze=False
    )
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        _bars(ax, panel.measurements)
        title = panel.scenario if result.shapes else f"keyshared bench {result.scenario}"
        ax.set_title(f"{title}\n{_headline(panel)}", fontsize=9)
    if result.shapes:
        fig.suptitle(f"keyshared bench {result.scenario}: {_headline(result)}", fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (sum(heights) + 0.8)))  # room for it
    else:
        fig.tight_layout()
    path = directory / f"{result.scenario}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _headline(result: ScenarioResult) -> str:
    headline = next(iter(result.ratios.items()), None)
    return f"{headline[0]} = {_number(headline[1])}" if headline else ""


def _bars(ax: Any, measurements: list[Measurement]) -> None:
    """Per contender a steady-state bar (dark) above a whole-run bar (light); a bound or a
    contender without marks gets its single figure."""
    rows = range(len(measurements))
    steady = [m.steady_figure if m.kind != "bound" else None for m in measurements]
    both = [s is not None for s in steady]
    whole = ax.barh(
        [r + (0.2 if b else 0.0) for r, b in zip(rows, both, strict=True)],
        [m.figure for m in measurements],
        height=[0.4 if b else 0.8 for b in both],
        color=[
            "#9aa5b1" if m.kind == "bound" else "#9cc0e6" if b else "#2f6fb0"
            for m, b in zip(measurements, both, strict=True)
        ],
    )
    for bar, m in zip(whole, measurements, strict=True):
        if m.kind == "bound":
            bar.set_hatch("//")
        _value(ax, bar, m.figure)
    picked = [(r, s) for r, s in zip(rows, steady, strict=True) if s is not None]
    if picked:
        bars = ax.barh(
            [r - 0.2 for r, _ in picked],
            [s for _, s in picked],
            height=0.4,
            color="#2f6fb0",
        )
        for bar, (_, value) in zip(bars, picked, strict=True):
            _value(ax, bar, value)
        from matplotlib.patches import Patch

        legend = [
            Patch(color="#2f6fb0", label="steady state (middle 90 %)"),
            Patch(color="#9cc0e6", label="whole run"),
        ]
        ax.legend(handles=legend, fontsize=7, loc="lower right")
    ax.set_yticks(list(rows), [m.label for m in measurements])
    ax.invert_yaxis()
    ax.margins(x=0.12)  # room for the value printed after the longest bar
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlabel(" / ".join(sorted({m.unit for m in measurements})), fontsize=8)


def _value(ax: Any, bar: Any, value: float) -> None:
    ax.text(
        bar.get_width(),
        bar.get_y() + bar.get_height() / 2,
        f" {_number(value)}",
        va="center",
        fontsize=7,
    )
