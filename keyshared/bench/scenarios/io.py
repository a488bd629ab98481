"""``io``: an I/O-bound handler on one partition, where a plain consumer is stuck at 1/L.

One partition, 10k keys, a 5 ms handler (a database or HTTP call). A consumer group cannot help:
one partition means one member at a time. keyshared runs ``W`` keys at once, so its ceiling is
W/L (64 / 5 ms = 12,800 records/s). Measured in the same run, on the same topic: keyshared, a
plain serial consumer, a naive thread pool (as parallel, but unordered and with unsafe commits)
and, when installed, the peers: quixstreams, Confluent Parallel Consumer and pyrallel-consumer,
the last two with per-key order and keyshared's worker count as their concurrency.
"""

from __future__ import annotations

from keyshared.bench import bounds
from keyshared.bench.contenders import run_keyshared, run_serial, run_thread_pool
from keyshared.bench.context import BenchContext
from keyshared.bench.peers import add_peers
from keyshared.bench.quix import quix_available, run_quixstreams
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.bench.workload import produce, uniform_keys

__all__ = ["run_io"]


@register("io", "1 partition, 10k keys, 5 ms handler: keyshared vs serial, thread pool, W/L")
def run_io(ctx: BenchContext) -> ScenarioResult:
    workers = ctx.workers or 64
    handler_s = (ctx.handler_ms if ctx.handler_ms is not None else 5.0) / 1000
    records = ctx.records or ctx.size(40_000, 3_000)
    serial_records = max(100, records // 40)  # at 1/L a second, a sample gives the same rate
    key_count = 10_000
    result = ScenarioResult(
        "io",
        "I/O-bound handler on 1 partition: keyshared vs a plain serial consumer, a naive "
        "thread pool and the physical bound W/L",
        {
            "partitions": 1,
            "keys": key_count,
            "records": records,
            "serial_records": serial_records,
            "workers": workers,
            "handler_ms": handler_s * 1000,
        },
    )
    keys = uniform_keys(records, key_count)
    topic = ctx.new_topic("io", 1)
    produce(ctx.bootstrap, topic, keys)
    ctx.say(f"io: {records} records on {topic}")

    nominal = result.add(
        Measurement("bound W/L (nominal L)", kind="bound", value=workers / handler_s)
    )
    slept = bounds.measured_sleep(handler_s)
    measured = result.add(
        Measurement(
            "bound W/L (L as measured here)",
            kind="bound",
            value=workers / slept,
            extra={"measured_handler_ms": round(slept * 1000, 3)},
        )
    )
    balance = bounds.ring_balance(keys, workers)
    ctx.say("io: keyshared")
    ks = result.add(
        run_keyshared(ctx.bootstrap, topic, ctx.new_group("io-ks"), records, handler_s, workers)
    )
    ctx.say("io: plain serial consumer")
    serial = result.add(
        run_serial(ctx.bootstrap, topic, ctx.new_group("io-serial"), serial_records, handler_s)
    )
    ctx.say("io: naive thread pool")
    pool = result.add(
        run_thread_pool(ctx.bootstrap, topic, ctx.new_group("io-pool"), records, handler_s, workers)
    )
    result.ratio("keyshared_vs_bound", ks.figure, nominal.figure)
    result.ratio("keyshared_vs_bound_measured_L", ks.figure, measured.figure)
    result.ratio("keyshared_vs_serial", ks.figure, serial.figure)
    result.ratio("keyshared_vs_thread_pool", ks.figure, pool.figure)
    result.ratio("thread_pool_vs_bound", pool.figure, nominal.figure)
    result.ratio("serial_vs_bound", serial.figure, nominal.figure)
    result.ratio("ring_balance", balance, 1.0)
    version = quix_available(ctx.quix_python)
    if version is None:
        result.notes.append("quixstreams not importable (see --quix-python): skipped")
    else:
        ctx.say(f"io: quixstreams {version}")
        quix = result.add(
            run_quixstreams(
                ctx.quix_python,
                ctx.bootstrap,
                topic,
                ctx.new_group("io-quix"),
                serial_records,
                handler_s,
                version,
            )
        )
        result.ratio("keyshared_vs_quixstreams", ks.figure, quix.figure)
        result.ratio("quixstreams_vs_serial", quix.figure, serial.figure)
    add_peers(
        ctx,
        result,
        topic=topic,
        records=records,
        handler_s=handler_s,
        concurrency=workers,
        keyshared_figure=ks.figure,
    )
    result.notes.append(
        f"ring balance {balance:.2f}: the ring gives the busiest of {workers} workers "
        f"{1 / balance:.2f}x the mean; threads that run out of work steal queued records, so "
        f"keyshared is not capped at {balance:.2f} of W/L"
    )
    return result
