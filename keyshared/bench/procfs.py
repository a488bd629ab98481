"""Another process's memory, read from ``/proc`` (Linux), for figures that must be that
process's own: the ``stuck`` scenario's consumer runs in a child so the bench's own allocations
(the producer, the parent's bookkeeping) do not count against it.

- ``VmRSS``: resident memory now.
- ``VmHWM``: the peak resident memory ("high water mark"). Writing ``5`` to
  ``/proc/PID/clear_refs`` resets it to the current RSS (Linux >= 4.0, for a process we may
  ptrace, i.e. our own child), so the peak *after* a baseline is read exactly, with no sampling.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ProcMemory", "parse_status", "read_memory", "reset_peak"]

_PROC = Path("/proc")


class ProcMemory:
    """``rss`` and ``peak`` (``VmHWM``) of a process, in bytes."""

    __slots__ = ("peak", "rss")

    def __init__(self, rss: int, peak: int) -> None:
        self.rss, self.peak = rss, peak

    def __repr__(self) -> str:
        return f"ProcMemory(rss={self.rss}, peak={self.peak})"


def parse_status(text: str) -> dict[str, int]:
    """The ``kB`` fields of a ``/proc/PID/status`` text, in bytes (``{"VmRSS": ...}``)."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            fields[name.strip()] = int(parts[0]) * 1024
    return fields


def read_memory(pid: int) -> ProcMemory:
    """RSS and peak RSS of ``pid`` now.

    :raises OSError: the process is gone (or ``/proc`` is not there).
    """
    fields = parse_status((_PROC / str(pid) / "status").read_text())
    rss = fields["VmRSS"]
    return ProcMemory(rss, fields.get("VmHWM", rss))


def reset_peak(pid: int) -> bool:
    """Reset ``pid``'s peak RSS to its RSS now; False where the kernel refuses (then the caller
    has only the peak since the process started, or its own samples)."""
    try:
        (_PROC / str(pid) / "clear_refs").write_text("5")
    except OSError:
        return False
    return True
