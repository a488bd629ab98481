"""Where results go: a rich table on the terminal, one JSON file, one PNG chart per scenario.

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
from rich.table import Table

from keyshared.bench.result import ScenarioResult

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


def print_result(console: Console, result: ScenarioResult) -> None:
    """One table per scenario: each contender's figure, then the ratios."""
    table = Table(title=f"{result.scenario}: {result.description}", title_justify="left")
    table.add_column("contender")
    table.add_column("kind")
    table.add_column("records", justify="right")
    table.add_column("figure", justify="right")
    table.add_column("unit")
    for m in result.measurements:
        records = f"{m.records:,}" if m.records else "-"
        table.add_row(m.label, m.kind, records, _number(m.figure), m.unit)
    console.print(table)
    ratios = Table(show_header=True, box=None, padding=(0, 2))
    ratios.add_column("ratio")
    ratios.add_column("value", justify="right")
    for name, value in result.ratios.items():
        ratios.add_row(name, _number(value))
    console.print(ratios)
    for note in result.notes:
        console.print(f"  [dim]{note}[/]")


def write_json(path: Path, results: list[ScenarioResult], params: dict[str, Any]) -> None:
    data = {
        "machine": machine(),
        "run": params,
        "scenarios": {r.scenario: r.to_json() for r in results},
    }
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_chart(directory: Path, result: ScenarioResult) -> Path:
    """A horizontal bar per contender (bounds hatched), titled with the headline ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [m.label for m in result.measurements]
    values = [m.figure for m in result.measurements]
    units = {m.unit for m in result.measurements}
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(labels) + 1.6))
    bars = ax.barh(
        labels,
        values,
        color=["#9aa5b1" if m.kind == "bound" else "#2f6fb0" for m in result.measurements],
    )
    for bar, m in zip(bars, result.measurements, strict=True):
        if m.kind == "bound":
            bar.set_hatch("//")
        ax.text(
            bar.get_width(),
            bar.get_y() + bar.get_height() / 2,
            f" {_number(m.figure)}",
            va="center",
            fontsize=8,
        )
    ax.invert_yaxis()
    ax.set_xlabel(" / ".join(sorted(units)))
    headline = next(iter(result.ratios.items()), None)
    subtitle = f"{headline[0]} = {_number(headline[1])}" if headline else ""
    ax.set_title(f"keyshared bench {result.scenario}\n{subtitle}", fontsize=10)
    fig.tight_layout()
    path = directory / f"{result.scenario}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
