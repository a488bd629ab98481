"""Time pyrallel-consumer on a bench topic; run as a script by the interpreter that has it.

Why a separate script: pyrallel-consumer declares Python >= 3.12 and pins its own dependencies
(pydantic-settings, msgpack, ...), so it lives in its own venv, installed with
``--ignore-requires-python`` (it imports and runs on 3.11). This file imports nothing from
keyshared, takes its arguments on the command line and prints one JSON line:
``{"records", "seconds", "every", "marks"}``, timed like keyshared's ``Tally``: first handler
start to the ``records``-th handler finish, and the time of every ``every``-th completion since
that start, for the steady-state figure (``keyshared/bench/steady.py``).

    python pyrallel_worker.py MODE BOOTSTRAP TOPIC GROUP RECORDS HANDLER_SECONDS CONCURRENCY TIMEOUT

MODE ``async``: an ``async`` handler (``await asyncio.sleep``), at most CONCURRENCY in flight.
MODE ``process``: a sync handler (``time.sleep``) in CONCURRENCY worker processes, with pyrallel's
default buffer and IPC batching. Both with ``OrderingMode.KEY_HASH`` (per-key order).

In process mode the handler runs in child processes, so the count, the two instants and the
marks live in shared memory created before the children fork; CLOCK_MONOTONIC is system-wide
on Linux, so the children's instants compare.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sys
import time
from typing import Any

__all__ = ["main"]

# Shared with the process-mode children (inherited through fork): count, first start, last end,
# and the completion marks (one every _EVERY completions, preallocated).
_COUNT: Any = None
_TIMES: Any = None
_MARKS: Any = None
_EVERY = 1
_TARGET = 0
_HANDLER_S = 0.0


def _started() -> None:
    with _TIMES.get_lock():
        if _TIMES[0] == 0.0:
            _TIMES[0] = time.monotonic()


def _finished() -> None:
    with _COUNT.get_lock():
        _COUNT.value += 1
        done = _COUNT.value
        if done % _EVERY == 0 and done // _EVERY <= len(_MARKS):
            _MARKS[done // _EVERY - 1] = time.monotonic()
        if done == _TARGET:
            _TIMES[1] = time.monotonic()


def handle_sync(item: Any) -> None:
    """The process-mode handler: module level, so pyrallel can pickle it."""
    _started()
    if _HANDLER_S > 0:
        time.sleep(_HANDLER_S)
    _finished()


async def handle_async(item: Any) -> None:
    _started()
    if _HANDLER_S > 0:
        await asyncio.sleep(_HANDLER_S)
    _finished()


def _config(mode: str, bootstrap: str, group: str, concurrency: int) -> Any:
    from pyrallel_consumer import (
        ExecutionConfig,
        ExecutionMode,
        KafkaConfig,
        OrderingMode,
        ParallelConsumerConfig,
    )
    from pyrallel_consumer.config import ProcessConfig

    if mode == "async":
        execution = ExecutionConfig(mode=ExecutionMode.ASYNC, max_in_flight=concurrency)
    else:
        # Only the concurrency is set; the rest are pyrallel's defaults (1000 records in flight,
        # batches of up to 64 records per process IPC). Tried on a 3k-record io topic:
        # batch_size 1, or a buffer of 4 x concurrency, were both slower than the defaults.
        execution = ExecutionConfig(
            mode=ExecutionMode.PROCESS, process_config=ProcessConfig(process_count=concurrency)
        )
    return KafkaConfig(
        BOOTSTRAP_SERVERS=bootstrap,
        CONSUMER_GROUP=group,
        AUTO_OFFSET_RESET="earliest",
        ENABLE_AUTO_COMMIT=False,
        dlq_enabled=False,
        parallel_consumer=ParallelConsumerConfig(
            ordering_mode=OrderingMode.KEY_HASH,
            execution=execution,
        ),
    )


async def _run(mode: str, config: Any, topic: str, timeout: float) -> None:
    from pyrallel_consumer import PyrallelConsumer

    worker = handle_async if mode == "async" else handle_sync
    consumer = PyrallelConsumer(config, worker, topic)
    await consumer.start()
    deadline = time.monotonic() + timeout
    try:
        while _COUNT.value < _TARGET and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    finally:
        await consumer.stop()


def main(argv: list[str]) -> int:
    global _COUNT, _TIMES, _MARKS, _EVERY, _TARGET, _HANDLER_S
    if len(argv) != 8 or argv[0] not in ("async", "process"):
        print(
            "usage: pyrallel_worker.py async|process BOOTSTRAP TOPIC GROUP RECORDS "
            "HANDLER_SECONDS CONCURRENCY TIMEOUT",
            file=sys.stderr,
        )
        return 2
    mode, bootstrap, topic, group = argv[:4]
    _TARGET, _HANDLER_S = int(argv[4]), float(argv[5])
    concurrency, timeout = int(argv[6]), float(argv[7])
    context = multiprocessing.get_context("fork")
    _COUNT = context.Value("q", 0)
    _TIMES = context.Array("d", 2)
    _EVERY = max(1, _TARGET // 1000)  # keyshared.bench.steady.mark_every
    _MARKS = context.Array("d", _TARGET // _EVERY)
    multiprocessing.set_start_method("fork", force=True)
    asyncio.run(_run(mode, _config(mode, bootstrap, group, concurrency), topic, timeout))
    count = int(_COUNT.value)
    if count < _TARGET:
        print(
            f"pyrallel {mode}: only {count} of {_TARGET} records within {timeout:.0f} s",
            file=sys.stderr,
        )
        return 1
    marks = [round(mark - _TIMES[0], 6) for mark in _MARKS[:]]
    result = {"records": _TARGET, "seconds": _TIMES[1] - _TIMES[0], "every": _EVERY}
    print(json.dumps({**result, "marks": marks}))
    sys.stdout.flush()
    os._exit(0)  # children and librdkafka threads must not delay the exit


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
