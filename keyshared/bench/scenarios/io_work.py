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
One partition, ``W`` workers,
each workload shape of ``io`` (4, 8, 32 records per key, Zipf): the ceiling is the order bound
(W/L for the uniform shapes), and a naive thread pool running the same handler (unordered,
unsafe commits) shows how much of it Python itself leaves. keyshared runs in-process and
through its CLI (``keyshared run``, same handler). The peers are not raced here: their
harnesses run a sleep, not this handler, so ``io`` is where they are compared.
"""

from __future__ import annotations

import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from keyshared.bench.cli_contender import run_keyshared_cli
from keyshared.bench.contenders import BenchError, Tally, run_keyshared
from keyshared.bench.context import BenchContext
from keyshared.bench.handlers import WorkHandler
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.bench.scenarios.io import bound_measurements
from keyshared.bench.shaped import ShapeTopic, race_trio, run_shapes

__all__ = ["WorkHandler", "run_io_work"]


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


@register("io_work", "json.loads + 5 ms + append a line, shapes 4/8/32 per key + Zipf: vs bound")
def run_io_work(ctx: BenchContext) -> ScenarioResult:
    workers = ctx.workers or 64
    handler_s = (ctx.handler_ms if ctx.handler_ms is not None else 5.0) / 1000
    result = ScenarioResult(
        "io_work",
        "realistic handler (json.loads, sleep L, append a line) on 1 partition, per workload "
        "shape: keyshared (in-process and CLI) vs the order bound and a naive thread pool "
        "running the same handler",
        {"partitions": 1, "workers": workers, "handler_ms": handler_s * 1000},
    )
    with tempfile.TemporaryDirectory(prefix="keyshared-io-work-") as folder:
        out = Path(folder) / "out.log"
        work = WorkHandler(out, handler_s)
        handler_l = work.measured()

        def race(ctx: BenchContext, nested: ScenarioResult, topic: ShapeTopic) -> None:
            tag = f"io-work-{topic.shape.name}"
            nominal, measured = bound_measurements(nested, topic, workers, handler_s, handler_l)

            def on(group: str) -> tuple[str, str, str, int]:
                return ctx.bootstrap, topic.name, group, topic.records

            race_trio(
                ctx,
                nested,
                tag,
                (nominal, measured),
                (
                    (
                        "keyshared",
                        "ks",
                        lambda group: run_keyshared(
                            *on(group),
                            0.0,
                            workers,
                            on_record=lambda record: work(record.raw_key, record.value),
                        ),
                    ),
                    (
                        "keyshared run (CLI subprocess), same handler",
                        "cli",
                        lambda group: run_keyshared_cli(
                            *on(group), handler_s, workers, work_file=out
                        ),
                    ),
                    (
                        "naive thread pool, same handler",
                        "pool",
                        lambda group: run_pool(*on(group), work, workers),
                    ),
                ),
            )

        try:
            run_shapes(ctx, result, "io-work", race)
        finally:
            work.close()
    result.notes.append(
        f"one call of the handler takes {handler_l * 1000:.3f} ms here on its own "
        f"(nominal {handler_s * 1000:g} ms): the sleep's overshoot, parsing and the append cost "
        f"{(handler_l - handler_s) * 1e6:.0f} us of it, partly holding the GIL"
    )
    return result
