"""A handler for consumer subprocesses that journals every start and end of a record.

Run it with ``keyshared run tests.kafka.support.journal_handler:handle ...`` from the repository
root (``handle_async`` is the same as an ``async def`` handler). Each record's value is its per-key
sequence number (ASCII). For every call the handler appends two lines to ``$KS_JOURNAL``::

    S <key hex> <seq> <pid> <partition> <offset> <monotonic ns> <attempt>
    E <key hex> <seq> <pid> <partition> <offset> <monotonic ns> <attempt>

``time.monotonic_ns`` is CLOCK_MONOTONIC, one clock for every process of the machine, so the
journals of several consumers can be merged into one timeline. Each line is one ``os.write`` on
an ``O_APPEND`` descriptor: nothing is buffered in the process, so a SIGKILL loses no line
that was written.

Environment:

- ``KS_JOURNAL``: the journal file (required).
- ``KS_SLEEP_MS``: ``"lo,hi"``, a uniform random sleep inside the handler (default ``"0,0"``).
- ``KS_STUCK_KEY``: a key (ASCII) whose record ``KS_STUCK_SEQ`` (default 1) never finishes.
- ``KS_SLOW_KEY`` / ``KS_SLOW_SECONDS``: that key's records take this long.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from typing import Any

_FD = os.open(os.environ["KS_JOURNAL"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
_PID = os.getpid()
_LO, _HI = (float(x) / 1000.0 for x in os.environ.get("KS_SLEEP_MS", "0,0").split(","))
_STUCK_KEY = os.environ.get("KS_STUCK_KEY", "").encode() or None
_STUCK_SEQ = int(os.environ.get("KS_STUCK_SEQ", "1"))
_SLOW_KEY = os.environ.get("KS_SLOW_KEY", "").encode() or None
_SLOW_SECONDS = float(os.environ.get("KS_SLOW_SECONDS", "0"))
_NEVER = threading.Event()


def _line(kind: str, record: Any, seq: int) -> None:
    key = record.raw_key.hex() if record.raw_key is not None else "-"
    os.write(
        _FD,
        f"{kind} {key} {seq} {_PID} {record.partition} {record.offset} "
        f"{time.monotonic_ns()} {record.attempt}\n".encode(),
    )


def handle(record: Any) -> None:
    seq = int(record.value)
    _line("S", record, seq)
    if record.raw_key == _STUCK_KEY and seq == _STUCK_SEQ:
        _NEVER.wait()  # until the process is killed
    if record.raw_key == _SLOW_KEY:
        time.sleep(_SLOW_SECONDS)
    elif _HI > 0:
        time.sleep(random.uniform(_LO, _HI))
    _line("E", record, seq)


async def handle_async(record: Any) -> None:
    seq = int(record.value)
    _line("S", record, seq)
    if record.raw_key == _STUCK_KEY and seq == _STUCK_SEQ:
        await asyncio.Event().wait()  # until the process is killed
    if record.raw_key == _SLOW_KEY:
        await asyncio.sleep(_SLOW_SECONDS)
    elif _HI > 0:
        await asyncio.sleep(random.uniform(_LO, _HI))
    _line("E", record, seq)
