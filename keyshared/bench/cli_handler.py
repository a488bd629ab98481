"""The handler of the CLI contender: ``keyshared run keyshared.bench.cli_handler:handle``.

Why a contender through the CLI at all: ``keyshared run`` is how most users run keyshared, and
it builds its consumer from command-line defaults, not from the bench's keyword arguments; a
regression in that path (an option wired wrong, a default that costs throughput) would not show
in the in-process figure.

The process is configured by its environment, since ``keyshared run`` passes the handler
nothing but records:

- ``KS_BENCH_SLEEP_S``: the I/O wait of each call, in seconds.
- ``KS_BENCH_WORK_FILE``: when set, the ``io_work`` handler (parse, wait, append a line here).
- ``KS_BENCH_TARGET``: records to time. At the target-th finish the handler prints one JSON
  line ``{"records": N, "seconds": S}`` on stdout, timed like every contender (first handler
  start to the N-th finish); the parent reads it and stops the process.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from keyshared.bench.handlers import WorkHandler, sleeper

__all__ = ["handle"]

_SLEEP_S = float(os.environ.get("KS_BENCH_SLEEP_S", "0"))
_WORK_FILE = os.environ.get("KS_BENCH_WORK_FILE")
_TARGET = int(os.environ.get("KS_BENCH_TARGET", "0"))

_work = WorkHandler(Path(_WORK_FILE), _SLEEP_S) if _WORK_FILE else None
_sleep = sleeper(_SLEEP_S)
_lock = threading.Lock()
_first: float | None = None
_count = 0


def handle(record: Any) -> None:
    """Run the scenario's handler on ``record`` and count it towards the target."""
    global _first, _count
    if _first is None:  # the earliest start wins, as in contenders.Tally.start
        now = time.monotonic()
        with _lock:
            if _first is None or now < _first:
                _first = now
    if _work is not None:
        _work(record.raw_key, record.value)
    else:
        _sleep()
    with _lock:
        _count += 1
        reached = _count == _TARGET
    if reached:
        seconds = time.monotonic() - (_first or 0.0)
        sys.stdout.write(json.dumps({"records": _TARGET, "seconds": seconds}) + "\n")
        sys.stdout.flush()
