"""``io_work``: the ``io`` scenario with a handler that does what real handlers do around the wait.

A sleep-only handler flatters every contender: the thread sleeps with the GIL released and
Python runs nothing else. A real handler also parses the record and writes a result, so its
threads compete for the GIL with the poll thread and with each other. Here each record's value
is parsed with ``json.loads``, the handler sleeps L (the database or HTTP call), then appends one
line to a file: one ``os.write`` on a descriptor opened with ``O_APPEND``, which the kernel
appends atomically, so the threads share no Python-level lock. (Two other ways to write were
tried and measure the file rather than the consumer: opening the file per record, where 64
threads contend in the file system and a thread pool reached 0.45 of W/L; and one shared
line-buffered file object, whose internal lock 64 threads convoy on, a thread pool 0.76-0.84.)
One partition, 10k keys,
``W`` workers: the ceiling is W/L, and a naive thread pool running the same handler (unordered,
unsafe commits) shows how much of it Python itself leaves.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from keyshared.bench.contenders import BenchError, Tally, run_keyshared
from keyshared.bench.context import BenchContext
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.bench.workload import produce, uniform_keys

__all__ = ["WorkHandler", "run_io_work"]


class WorkHandler:
    """Parse the JSON value, wait ``seconds``, append one line to ``path``.

    :param path: the file every call appends a line to.
    :param seconds: the simulated I/O wait.
    """

    def __init__(self, path: Path, seconds: float) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._seconds = seconds

    def __call__(self, key: bytes | None, value: bytes) -> None:
        document = json.loads(value)
        time.sleep(self._seconds)
        os.write(self._fd, b"%s\t%d\n" % (key or b"", document["n"]))

    def close(self) -> None:
        os.close(self._fd)

    def measured(self, samples: int = 200) -> float:
        """Mean wall time of one call here and now (what L really is for this handler)."""
        value = b'{"n":1,"pad":"%s"}' % (b"x" * 80)
        began = time.perf_counter()
        for _ in range(samples):
            self(b"probe", value)
        return (time.perf_counter() - began) / samples


def run_pool(
    bootstrap: str, topic: str, group: str, records: int, work: WorkHandler, threads: int
) -> Measurement:
    """A consumer that throws every record at a thread pool running ``work``: no order, no
    safe commit; what Python gives the same handler without keyshared's bookkeeping."""
    tally = Tally(records)
    slots = threading.Semaphore(threads * 4)  # bounded, or the loop would buffer the topic
    pool = ThreadPoolExecutor(threads, thread_name_prefix="bench-work-pool")

    def task(message: Any) -> None:
        try:
            tally.start()
            work(message.key(), message.value())
            tally.finish()
        finally:
            slots.release()

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 600
    try:
        while not tally.done.is_set():
            if time.monotonic() > deadline:
                raise BenchError(f"thread pool: only {tally.count} of {records} records")
            for message in consumer.consume(1000, 0.2):
                if message.error() is None:
                    slots.acquire()
                    pool.submit(task, message)
    finally:
        consumer.close()
        pool.shutdown(wait=True, cancel_futures=True)
    return tally.measurement(f"naive thread pool ({threads} threads, unordered)", threads=threads)


@register("io_work", "1 partition, 10k keys, json.loads + 5 ms + append a line: keyshared vs W/L")
def run_io_work(ctx: BenchContext) -> ScenarioResult:
    workers = ctx.workers or 64
    handler_s = (ctx.handler_ms if ctx.handler_ms is not None else 5.0) / 1000
    records = ctx.records or ctx.size(40_000, 3_000)
    key_count = 10_000
    result = ScenarioResult(
        "io_work",
        "realistic handler (json.loads, sleep L, append a line) on 1 partition: keyshared vs "
        "the bound W/L and a naive thread pool running the same handler",
        {
            "partitions": 1,
            "keys": key_count,
            "records": records,
            "workers": workers,
            "handler_ms": handler_s * 1000,
        },
    )
    topic = ctx.new_topic("io-work", 1)
    produce(ctx.bootstrap, topic, uniform_keys(records, key_count))
    ctx.say(f"io_work: {records} records on {topic}")
    with tempfile.TemporaryDirectory(prefix="keyshared-io-work-") as folder:
        work = WorkHandler(Path(folder) / "out.log", handler_s)
        nominal = result.add(
            Measurement("bound W/L (nominal L)", kind="bound", value=workers / handler_s)
        )
        handler_l = work.measured()
        measured = result.add(
            Measurement(
                "bound W/L (L = this handler as measured here)",
                kind="bound",
                value=workers / handler_l,
                extra={"measured_handler_ms": round(handler_l * 1000, 3)},
            )
        )
        ctx.say("io_work: keyshared")
        ks = result.add(
            run_keyshared(
                ctx.bootstrap,
                topic,
                ctx.new_group("io-work-ks"),
                records,
                0.0,
                workers,
                on_record=lambda record: work(record.raw_key, record.value),
            )
        )
        ctx.say("io_work: naive thread pool, same handler")
        pool = result.add(
            run_pool(ctx.bootstrap, topic, ctx.new_group("io-work-pool"), records, work, workers)
        )
        work.close()
    result.ratio("keyshared_vs_bound", ks.figure, nominal.figure)
    result.ratio("keyshared_vs_bound_measured_L", ks.figure, measured.figure)
    result.ratio("keyshared_vs_thread_pool", ks.figure, pool.figure)
    result.ratio("thread_pool_vs_bound", pool.figure, nominal.figure)
    result.notes.append(
        f"one call of the handler takes {handler_l * 1000:.3f} ms here on its own "
        f"(nominal {handler_s * 1000:g} ms): the sleep's overshoot, parsing and the append cost "
        f"{(handler_l - handler_s) * 1e6:.0f} us of it, partly holding the GIL"
    )
    return result
