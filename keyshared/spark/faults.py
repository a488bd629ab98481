"""A test-only hook that makes a task's first attempt fail at a chosen point.

Why a Spark *local property*: it travels with the job to every task (``TaskContext
.getLocalProperty``), needs no API parameter and no environment of the workers, and only the
thread that set it is affected. Tests set it with
``spark.sparkContext.setLocalProperty("keyshared.fault", "replay:mid")``; nothing else does.
Points: ``replay:mid`` (records produced and acknowledged, transaction open),
``replay:after_commit`` (transaction committed, task not yet finished), ``reprocess:mid``.
"""

from __future__ import annotations

__all__ = ["FAULT_PROPERTY", "InjectedTaskFailure", "maybe_fail"]

FAULT_PROPERTY = "keyshared.fault"


class InjectedTaskFailure(RuntimeError):
    """Raised by the test hook; Spark retries the task."""


def maybe_fail(fault: str | None, point: str, attempt: int) -> None:
    """Raise at ``point`` if the hook asks for it and this is the task's first attempt."""
    if fault and attempt == 0 and point in fault.split(","):
        raise InjectedTaskFailure(f"injected failure at {point} (test hook {FAULT_PROPERTY})")
