"""Handlers for the reprocess tests; importable by Spark's Python workers (``tests.*``)."""

from __future__ import annotations

import os
from pathlib import Path

from keyshared import Record


class Refused(Exception):
    """What the logging handler raises for values ending in ``!``."""


class LoggingHandler:
    """Appends ``key offset partition task`` per call to a file per worker process, then
    raises :class:`Refused` for values ending in ``!``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, record: Record) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else -1
        key = record.key.hex() if record.key is not None else "-"
        with open(self.folder / f"{os.getpid()}.log", "a") as log:
            log.write(f"{key} {record.offset} {record.partition} {task}\n")
        if record.value.endswith(b"!"):
            raise Refused(f"refusing offset {record.offset}")


def refuse_odd(record: Record) -> None:
    """For ``--handler tests.spark.handlers:refuse_odd``: fails odd values."""
    if int(record.value) % 2:
        raise ValueError(f"odd: {record.value!r}")
