"""``async_io``: an ``async def`` handler at high concurrency, where threads would not scale.

One partition, 10k keys, a handler that awaits ``asyncio.sleep(L)`` with ``workers`` (default
1,000) coroutines at once: the ceiling is W/L (1,000 / 5 ms = 200,000 records/s), far above what
one Python event loop can schedule, so the scenario also runs the loop's own ceiling in the same
run: a bare consumer that starts one task per record on one event loop, at most W at a time,
with no order and no commits. keyshared's ratio to that is what its ordering and safe cursor
cost an async handler.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from confluent_kafka import Consumer

from keyshared.bench.contenders import BenchError, Tally
from keyshared.bench.context import BenchContext
from keyshared.bench.peers import add_peers
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.bench.workload import produce, uniform_keys
from keyshared.record import Record

__all__ = ["run_async_io", "run_async_keyshared", "run_bare_asyncio"]


def run_async_keyshared(
    bootstrap: str, topic: str, group: str, records: int, handler_s: float, concurrency: int
) -> Measurement:
    """Time a KeySharedConsumer with an ``async def`` handler over ``records`` records."""
    from keyshared.consumer.key_shared_consumer import KeySharedConsumer

    tally = Tally(records)

    async def handle(record: Record) -> None:
        tally.start()
        await asyncio.sleep(handler_s)
        tally.finish()

    consumer = KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"},
        [topic],
        handle,
        workers=concurrency,
    )
    thread = threading.Thread(target=consumer.run, name="bench-keyshared-async", daemon=True)
    thread.start()
    name = f"keyshared, async handler ({concurrency} at once)"
    try:
        tally.wait(name, 600)
    finally:
        consumer.stop()
        thread.join(60)
    return tally.measurement(name, concurrency=concurrency)


def run_bare_asyncio(
    bootstrap: str, topic: str, group: str, records: int, handler_s: float, concurrency: int
) -> Measurement:
    """Time one event loop that polls the consumer itself and starts a task per record, at
    most ``concurrency`` at a time: unordered, no commits; the loop's own ceiling."""
    tally = Tally(records)

    async def main() -> None:
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
        )
        consumer.subscribe([topic])
        slots = asyncio.Semaphore(concurrency)
        tasks: set[asyncio.Task[None]] = set()

        async def one(message: Any) -> None:
            try:
                tally.start()
                message.value()
                await asyncio.sleep(handler_s)
                tally.finish()
            finally:
                slots.release()

        deadline = time.monotonic() + 600
        try:
            while not tally.done.is_set():
                if time.monotonic() > deadline:
                    raise BenchError(f"bare asyncio: only {tally.count} of {records} records")
                # consume(timeout=0) never blocks the loop; sleep(0) lets the tasks run
                batch = consumer.consume(1000, 0) or ()
                for message in batch:
                    if message.error() is None:
                        await slots.acquire()
                        task = asyncio.create_task(one(message))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
                await asyncio.sleep(0 if batch else 0.001)
        finally:
            for task in tasks:
                task.cancel()
            consumer.close()

    asyncio.run(main())
    return tally.measurement(
        f"bare asyncio loop ({concurrency} tasks at once, unordered)", concurrency=concurrency
    )


@register("async_io", "1 partition, 10k keys, async 5 ms handler, 1,000 at once: vs W/L")
def run_async_io(ctx: BenchContext) -> ScenarioResult:
    concurrency = ctx.workers or 1000
    handler_s = (ctx.handler_ms if ctx.handler_ms is not None else 5.0) / 1000
    records = ctx.records or ctx.size(100_000, 5_000)
    key_count = 10_000
    result = ScenarioResult(
        "async_io",
        "async handler (await asyncio.sleep(L)) with 1,000 coroutines on 1 partition: keyshared "
        "vs W/L and a bare asyncio loop",
        {
            "partitions": 1,
            "keys": key_count,
            "records": records,
            "concurrency": concurrency,
            "handler_ms": handler_s * 1000,
        },
    )
    topic = ctx.new_topic("async-io", 1)
    produce(ctx.bootstrap, topic, uniform_keys(records, key_count))
    ctx.say(f"async_io: {records} records on {topic}")
    bound = result.add(
        Measurement("bound W/L (nominal L)", kind="bound", value=concurrency / handler_s)
    )
    ctx.say("async_io: keyshared")
    ks = result.add(
        run_async_keyshared(
            ctx.bootstrap, topic, ctx.new_group("async-ks"), records, handler_s, concurrency
        )
    )
    ctx.say("async_io: bare asyncio loop")
    bare = result.add(
        run_bare_asyncio(
            ctx.bootstrap, topic, ctx.new_group("async-bare"), records, handler_s, concurrency
        )
    )
    result.ratio("keyshared_vs_bound", ks.figure, bound.figure)
    result.ratio("keyshared_vs_bare_asyncio", ks.figure, bare.figure)
    result.ratio("bare_asyncio_vs_bound", bare.figure, bound.figure)
    # The peer with an async mode, at the same concurrency (a thread or process per in-flight
    # record, as Parallel Consumer and pyrallel's process mode use, is not the comparison).
    add_peers(
        ctx,
        result,
        topic=topic,
        records=records,
        handler_s=handler_s,
        concurrency=concurrency,
        keyshared=ks,
        parallel_consumer=False,
        pyrallel_modes=("async",),
    )
    result.notes.append(
        f"keyshared spends about {1e6 / ks.figure:.1f} us of event-loop and poll-thread time "
        f"per record, the bare loop {1e6 / bare.figure:.1f} us: at W/L a record may cost "
        f"{1e6 * handler_s / concurrency:.1f} us"
    )
    return result
