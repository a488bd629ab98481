"""A progress display for a running Spark job: tasks done, records read and written.

Why poll the status tracker from a thread: Spark's own console bar is off (it would fight with
rich), and the job itself blocks the calling thread; a daemon thread reads
``statusTracker()`` and an accumulator twice a second and redraws. Accumulators only grow when
a task finishes, so "records" advances in task-sized steps; the task count moves in between.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import SparkSession

__all__ = ["job_progress"]

_REFRESH_S = 0.5


@contextmanager
def job_progress(
    spark: SparkSession,
    console: Console,
    label: str,
    total_records: int,
    counter: Accumulator[int],
    enabled: bool = True,
) -> Iterator[None]:
    """Show ``label`` with the records counted by ``counter`` out of ``total_records`` and the
    tasks of the running stages, until the block ends."""
    if not enabled:
        yield
        return
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("records  [dim]{task.fields[tasks]}[/]"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        bar = progress.add_task(label, total=max(total_records, 1), tasks="starting")

        def refresh() -> None:
            while not stop.wait(_REFRESH_S):
                done = total = 0
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is not None:
                        done += info.numCompletedTasks
                        total += info.numTasks
                tasks = f"tasks {done}/{total}" if total else "planning"
                progress.update(bar, completed=min(counter.value, total_records), tasks=tasks)

        thread = threading.Thread(target=refresh, name="keyshared-spark-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            progress.update(bar, completed=min(counter.value, total_records), tasks="done")
