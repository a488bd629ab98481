"""The live display: produced and processed bars, with in-flight and dead-letter counts.

Dead letters are read from keyshared's own ``keyshared_dlq_writes_total`` counter, which counts
only writes the broker acknowledged, so the number shown is what is safely in the DLQ.
"""

from __future__ import annotations

from prometheus_client import REGISTRY
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

__all__ = ["DemoProgress", "metric_sum"]


def metric_sum(name: str) -> float:
    """Sum of every series of ``name`` in this process's registry."""
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == name
    )


class DemoProgress:
    """Two bars (produced, processed) refreshed by :meth:`update` from the main thread."""

    def __init__(self, console: Console, total: int) -> None:
        self._progress = Progress(
            TextColumn("{task.description:<10}"),
            BarColumn(bar_width=36),
            MofNCompleteColumn(),
            TextColumn("{task.fields[extra]}"),
            TimeElapsedColumn(),
            console=console,
            refresh_per_second=8,
        )
        self._produced: TaskID = self._progress.add_task("produced", total=total, extra="")
        self._processed: TaskID = self._progress.add_task("processed", total=total, extra="")

    def __enter__(self) -> DemoProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, produced: int, processed: int, in_flight: int, dead_letters: int) -> None:
        self._progress.update(self._produced, completed=produced)
        self._progress.update(
            self._processed,
            completed=processed,
            extra=f"in flight {in_flight:>3}  DLQ {dead_letters}",
        )

    @staticmethod
    def dead_letters() -> int:
        return int(metric_sum("keyshared_dlq_writes_total"))
