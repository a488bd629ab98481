"""A handler for consumer subprocesses that journals every start and end of a record.

Run it with ``keyshared run tests.kafka.support.journal_handler:handle ...`` from the repository
root (``handle_async`` is the same as an ``async def`` handler; ``handle_batch`` is a batch
handler for ``--batch-size``, journaling each record of its batch and failing the injected
ones through ``keyshared.BatchError``). Each record's value is its per-key
sequence number (ASCII). For every call the handler appends two lines to ``$KS_JOURNAL``::

    S <key hex> <seq> <pid> <partition> <offset> <monotonic ns> <attempt> <thread>
    E <key hex> <seq> <pid> <partition> <offset> <monotonic ns> <attempt> <thread>

``<thread>`` is the calling thread's native id: the chaos judge tells a call a worker decided
before its process was stopped (its first line after the stop) from one decided after.

A call that fails on purpose (the ``KS_FAIL_*`` knobs) ends with an ``F`` line instead of ``E``
and raises :class:`InjectedFailure`: the record is not finished, it is retried or dead-lettered.

``time.monotonic_ns`` is CLOCK_MONOTONIC, one clock for every process of the machine, so the
journals of several consumers can be merged into one timeline. Each line is one ``os.write`` on
an ``O_APPEND`` descriptor: nothing is buffered in the process, so a SIGKILL loses no line
that was written.

Environment:

- ``KS_JOURNAL``: the journal file (required).
- ``KS_SLEEP_MS``: ``"lo,hi"``, a uniform random sleep inside the handler (default ``"0,0"``).
- ``KS_STUCK_KEY``: a key (ASCII) whose record ``KS_STUCK_SEQ`` (default 1) never finishes.
- ``KS_SLOW_KEY`` / ``KS_SLOW_SECONDS``: that key's records take this long.
- ``KS_SLOW_KEYS``: ``"rate,seconds"``, a ``rate`` share of all keys (chosen by
  ``faults.fault_fraction``) whose records take ``seconds`` each (default ``"0,0"``).
- ``KS_FAIL_ONCE_RATE``: that share of records fails its first attempt (a retry succeeds).
- ``KS_FAIL_ALWAYS_RATE``: that share of records fails every attempt (poison: it ends in the
  DLQ, or blocks, by the ``--poison`` policy). Which records fail is decided by
  ``faults.fault_fraction`` of ``(key, seq)``, the same in every process, so a test knows them.
- ``KS_OUT_TOPIC``: with ``--exactly-once``, each finished record also writes its value (the
  sequence number) under its key to this topic through ``record.output``, with a ``src``
  header ``partition:offset``.
- ``KS_TRACE``: any value sets the library's ``keyshared.trace`` logger (cursor writes and
  reads of ``key_shared`` members) to DEBUG, for chaos investigations.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from typing import Any

from tests.kafka.support.faults import fault_fraction

if os.environ.get("KS_TRACE"):  # the library's cursor diagnostics, for chaos investigations
    logging.getLogger("keyshared.trace").setLevel(logging.DEBUG)

_FD = os.open(os.environ["KS_JOURNAL"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
_PID = os.getpid()
_LO, _HI = (float(x) / 1000.0 for x in os.environ.get("KS_SLEEP_MS", "0,0").split(","))
_STUCK_KEY = os.environ.get("KS_STUCK_KEY", "").encode() or None
_STUCK_SEQ = int(os.environ.get("KS_STUCK_SEQ", "1"))
_SLOW_KEY = os.environ.get("KS_SLOW_KEY", "").encode() or None
_SLOW_SECONDS = float(os.environ.get("KS_SLOW_SECONDS", "0"))
_SLOW_KEYS_RATE, _SLOW_KEYS_SECONDS = (
    float(x) for x in os.environ.get("KS_SLOW_KEYS", "0,0").split(",")
)
_FAIL_ONCE_RATE = float(os.environ.get("KS_FAIL_ONCE_RATE", "0"))
_FAIL_ALWAYS_RATE = float(os.environ.get("KS_FAIL_ALWAYS_RATE", "0"))
_NEVER = threading.Event()
_OUT_TOPIC = os.environ.get("KS_OUT_TOPIC") or None


class InjectedFailure(Exception):
    """A failure the test asked for (``KS_FAIL_ONCE_RATE`` / ``KS_FAIL_ALWAYS_RATE``)."""


def _injected_failure(record: Any, seq: int) -> str | None:
    """Why this attempt of the record must fail, or None."""
    if _FAIL_ONCE_RATE <= 0 and _FAIL_ALWAYS_RATE <= 0:
        return None
    fraction = fault_fraction(record.raw_key, seq)
    if fraction < _FAIL_ALWAYS_RATE:
        return "poison"
    if fraction < _FAIL_ALWAYS_RATE + _FAIL_ONCE_RATE and record.attempt == 1:
        return "transient"
    return None


def _extra_sleep(record: Any) -> float:
    """Seconds a ``KS_SLOW_KEYS`` key takes (0 for the others)."""
    if _SLOW_KEYS_RATE > 0 and fault_fraction(record.raw_key) < _SLOW_KEYS_RATE:
        return _SLOW_KEYS_SECONDS
    return 0.0


def _fail(record: Any, seq: int, why: str) -> None:
    _line("F", record, seq)
    raise InjectedFailure(f"injected {why} failure: seq {seq} attempt {record.attempt}")


def _output(record: Any) -> None:
    if _OUT_TOPIC is not None and record.output is not None:
        src = f"{record.partition}:{record.offset}".encode()
        record.output.produce(_OUT_TOPIC, key=record.raw_key, value=record.value,
                              headers=[("src", src)])  # fmt: skip


def _line(kind: str, record: Any, seq: int) -> None:
    key = record.raw_key.hex() if record.raw_key is not None else "-"
    os.write(
        _FD,
        f"{kind} {key} {seq} {_PID} {record.partition} {record.offset} "
        f"{time.monotonic_ns()} {record.attempt} {threading.get_native_id()}\n".encode(),
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
    if extra := _extra_sleep(record):
        time.sleep(extra)
    if why := _injected_failure(record, seq):
        _fail(record, seq, why)
    _output(record)
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
    if extra := _extra_sleep(record):
        await asyncio.sleep(extra)
    if why := _injected_failure(record, seq):
        _fail(record, seq, why)
    _output(record)
    _line("E", record, seq)


def handle_batch(batch: list[Any]) -> None:
    """A batch handler: every record starts, one sleep for the batch, then each ends or fails.

    Injected failures fail only their own records (``keyshared.BatchError``); the batch's
    other records end normally.
    """
    import keyshared

    seqs = [int(record.value) for record in batch]
    for record, seq in zip(batch, seqs, strict=True):
        _line("S", record, seq)
    if _HI > 0:
        time.sleep(random.uniform(_LO, _HI))
    failures: dict[int, BaseException] = {}
    for index, (record, seq) in enumerate(zip(batch, seqs, strict=True)):
        if why := _injected_failure(record, seq):
            _line("F", record, seq)
            failures[index] = InjectedFailure(f"injected {why} failure: seq {seq}")
        else:
            _line("E", record, seq)
    if failures:
        raise keyshared.BatchError(failures)
