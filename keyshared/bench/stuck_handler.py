"""The handler of the ``stuck`` scenario's consumer process: one key stalls, the rest journal.

Run as ``keyshared run keyshared.bench.stuck_handler:handle ...`` by
:mod:`keyshared.bench.scenarios.stuck`, so the consumer's memory is its own process's RSS.
Configured by the environment (``keyshared run`` passes the handler nothing but records):

- ``KS_STUCK_KEY``: the key that stalls; ``KS_STUCK_S``: how long, in seconds.
- ``KS_JOURNAL``: every other record appends ``partition offset`` to this file when it
  finishes (one ``os.write`` on an ``O_APPEND`` descriptor: atomic, no Python lock), so the
  parent knows exactly what finished before it killed the process.
- ``KS_TARGET``: the number of other records; reaching it prints an ``all`` event.

Protocol with the parent, JSON lines on stdout and lines on stdin:

1. the stuck record's handler prints ``{"event": "stalled"}`` and waits for a line on stdin
   (the parent measures the baseline RSS, produces the other records, then writes ``go``);
2. ``{"event": "all", "finished": N, "seconds": S}`` when the N-th other record finished
   (S: from the first other record's start);
3. ``KS_STUCK_S`` seconds after ``go``: ``{"event": "stall_end", "finished": n}``, then the
   handler blocks on stdin again: the parent kills the process (kill -9) while the key is still
   stuck. End of stdin means the parent is gone: the process then stops itself (SIGTERM).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

__all__ = ["handle"]

_STUCK_KEY = os.environ.get("KS_STUCK_KEY", "stuck").encode()
_STUCK_S = float(os.environ.get("KS_STUCK_S", "0"))
_TARGET = int(os.environ.get("KS_TARGET", "0"))
_JOURNAL = os.environ.get("KS_JOURNAL")

_fd = os.open(_JOURNAL, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if _JOURNAL else -1
_lock = threading.Lock()
_count = 0
_first: float | None = None


def _emit(event: str, **fields: Any) -> None:
    with _lock:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()


def _wait_for_parent() -> bool:
    """Block until the parent writes a line; False when it is gone (end of stdin)."""
    return bool(sys.stdin.readline())


def _stall() -> None:
    _emit("stalled")
    if not _wait_for_parent():
        os.kill(os.getpid(), signal.SIGTERM)
        return
    threading.Event().wait(_STUCK_S)  # the stall itself: what this scenario is about
    with _lock:
        finished = _count
    _emit("stall_end", finished=finished)
    _wait_for_parent()  # the parent kills us here; if it died instead, stop cleanly
    os.kill(os.getpid(), signal.SIGTERM)


def handle(record: Any) -> None:
    """Stall on the stuck key; journal and count every other record."""
    global _count, _first
    if record.raw_key == _STUCK_KEY:
        _stall()
        return
    if _first is None:  # the earliest start wins, as in contenders.Tally.start
        now = time.monotonic()
        with _lock:
            if _first is None or now < _first:
                _first = now
    if _fd >= 0:
        os.write(_fd, b"%d %d\n" % (record.partition, record.offset))
    with _lock:
        _count += 1
        reached = _count == _TARGET
    if reached:
        _emit("all", finished=_TARGET, seconds=time.monotonic() - (_first or 0.0))
