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
  line on stdout, timed by the same :class:`~keyshared.bench.contenders.Tally` as every
  in-process contender (first handler start to the N-th finish, and completion marks for the
  steady-state figure; the line's format is :func:`~keyshared.bench.peers.common.timing_line`);
  the parent reads it and stops the process.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from keyshared.bench.contenders import Tally
from keyshared.bench.handlers import WorkHandler, sleeper
from keyshared.bench.peers.common import timing_line

__all__ = ["handle"]

_SLEEP_S = float(os.environ.get("KS_BENCH_SLEEP_S", "0"))
_WORK_FILE = os.environ.get("KS_BENCH_WORK_FILE")
_TARGET = int(os.environ.get("KS_BENCH_TARGET", "0"))

_work = WorkHandler(Path(_WORK_FILE), _SLEEP_S) if _WORK_FILE else None
_sleep = sleeper(_SLEEP_S)
_tally = Tally(_TARGET)
_reported = threading.Lock()  # taken once, by the thread that prints the result


def handle(record: Any) -> None:
    """Run the scenario's handler on ``record`` and count it towards the target."""
    _tally.start()
    if _work is not None:
        _work(record.raw_key, record.value)
    else:
        _sleep()
    _tally.finish()
    if _TARGET > 0 and _tally.done.is_set() and _reported.acquire(blocking=False):
        assert _tally.first is not None and _tally.last is not None
        seconds = _tally.last - _tally.first
        line = timing_line(_tally.timed, seconds, _tally.every, _tally.marks())
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
