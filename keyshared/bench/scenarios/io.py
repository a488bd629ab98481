"""``io``: an I/O-bound handler on one partition, where a plain consumer is stuck at 1/L.

One partition, a 5 ms handler (a database or HTTP call), 64 workers, raced on each workload
shape (:mod:`keyshared.bench.shapes`: 4, 8 and 32 records per key over 10k keys, and Zipf
s = 1.1 over 10k keys, keys in random order). A consumer group cannot help: one partition means
one member at a time. keyshared runs ``W`` keys at once, so its ceiling is the order bound
``max(N x L / W, hottest key's records x L)``: W/L (64 / 5 ms = 12,800 records/s) for the
uniform shapes, the hottest key's serial time under Zipf.

Measured on each shape, on the same topic: keyshared in-process, keyshared through its CLI
(``keyshared run`` in a subprocess, same handler), a naive thread pool (as parallel, but
unordered and with unsafe commits) and, at 8 per key and on Zipf (``--quick``: at 8 only), the
peers when installed (Confluent Parallel Consumer, pyrallel-consumer). Once, on the headline
shape (8 per key): a plain serial consumer and quixstreams, both at 1/L, so a sample gives their
rate.
"""

from __future__ import annotations

from keyshared.bench import bounds
from keyshared.bench.cli_contender import run_keyshared_cli
from keyshared.bench.contenders import run_keyshared, run_serial, run_thread_pool
from keyshared.bench.context import BenchContext
from keyshared.bench.peers import add_peers
from keyshared.bench.quix import quix_available, run_quixstreams
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.bench.shaped import ShapeTopic, race_trio, run_shapes
from keyshared.bench.shapes import ZIPF

__all__ = ["PEER_SHAPES", "QUICK_PEER_SHAPES", "bound_measurements", "run_io"]

PEER_SHAPES = frozenset({"8", ZIPF})  # the peers are slow (pyrallel ~2k/s): two shapes suffice
# --quick is a smoke: each peer raced once shows its harness still counts and times records;
# starting them again on Zipf (a JVM, 64 pyrallel processes) cost 17-20 s of CI's bench run.
QUICK_PEER_SHAPES = frozenset({"8"})


def bound_measurements(
    result: ScenarioResult, topic: ShapeTopic, workers: int, handler_s: float, measured_s: float
) -> tuple[Measurement, Measurement]:
    """The order bound of ``topic`` with the nominal and the measured handler time."""
    nominal = bounds.order_bound(topic.keys, workers, handler_s)
    measured = bounds.order_bound(topic.keys, workers, measured_s)
    what = "hottest key x L" if nominal.hot_key_bound else "W/L"
    detail = {
        "width_seconds": round(nominal.width_seconds, 3),
        "hottest_key_seconds": round(nominal.hottest_key_seconds, 3),
        "hottest_key_records": nominal.hottest_key_records,
    }
    first = result.add(
        Measurement(f"bound {what} (nominal L)", kind="bound", value=nominal.rate, extra=detail)
    )
    second = result.add(
        Measurement(
            f"bound {what} (L as measured here)",
            kind="bound",
            value=measured.rate,
            extra={"measured_handler_ms": round(measured_s * 1000, 3)},
        )
    )
    return first, second


@register("io", "1 partition, 5 ms handler, shapes 4/8/32 per key + Zipf: keyshared vs bound")
def run_io(ctx: BenchContext) -> ScenarioResult:
    workers = ctx.workers or 64
    handler_s = (ctx.handler_ms if ctx.handler_ms is not None else 5.0) / 1000
    result = ScenarioResult(
        "io",
        "I/O-bound handler on 1 partition, per workload shape: keyshared (in-process and CLI) "
        "vs a naive thread pool, the peers and the order bound",
        {"partitions": 1, "workers": workers, "handler_ms": handler_s * 1000},
    )
    slept = bounds.measured_sleep(handler_s)

    def race(ctx: BenchContext, nested: ScenarioResult, topic: ShapeTopic) -> None:
        tag = f"io-{topic.shape.name}"
        nominal, measured = bound_measurements(nested, topic, workers, handler_s, slept)

        def on(group: str) -> tuple[str, str, str, int]:
            return ctx.bootstrap, topic.name, group, topic.records

        ks, _, _ = race_trio(
            ctx,
            nested,
            tag,
            (nominal, measured),
            (
                ("keyshared", "ks", lambda group: run_keyshared(*on(group), handler_s, workers)),
                (
                    "keyshared run (CLI subprocess)",
                    "cli",
                    lambda group: run_keyshared_cli(*on(group), handler_s, workers),
                ),
                (
                    "naive thread pool",
                    "pool",
                    lambda group: run_thread_pool(*on(group), handler_s, workers),
                ),
            ),
        )
        balance = bounds.ring_balance(topic.keys, workers)
        nested.ratio("ring_balance", balance, 1.0)
        if topic.shape.is_zipf:
            nested.notes.append(
                "the thread pool ignores per-key order, so the hottest key does not bound it: "
                "thread_pool_vs_bound above 1 is what giving up order buys under skew"
            )
        if topic.headline:
            _once(ctx, nested, topic, handler_s, ks)
        if topic.shape.name in ctx.size(PEER_SHAPES, QUICK_PEER_SHAPES):
            add_peers(
                ctx,
                nested,
                topic=topic.name,
                records=topic.records,
                handler_s=handler_s,
                concurrency=workers,
                keyshared=ks,
            )

    run_shapes(ctx, result, "io", race)
    result.notes.append(
        f"time.sleep({handler_s * 1000:g} ms) took {slept * 1000:.3f} ms here; the "
        "'measured L' bounds use that"
    )
    return result


def _once(
    ctx: BenchContext,
    nested: ScenarioResult,
    topic: ShapeTopic,
    handler_s: float,
    ks: Measurement,
) -> None:
    """The contenders that run at 1/L whatever the shape: a sample of each, on one shape."""
    sample = max(100, topic.records // 40)  # at 1/L a second, a sample gives the same rate
    ctx.say(f"io-{topic.shape.name}: plain serial consumer ({sample} records)")
    serial = nested.add(
        run_serial(ctx.bootstrap, topic.name, ctx.new_group("io-serial"), sample, handler_s)
    )
    nested.ratios_both("keyshared_vs_serial", ks, serial)
    version = quix_available(ctx.quix_python)
    if version is None:
        nested.notes.append("quixstreams not importable (see --quix-python): skipped")
        return
    ctx.say(f"io-{topic.shape.name}: quixstreams {version} ({sample} records)")
    quix = nested.add(
        run_quixstreams(
            ctx.quix_python,
            ctx.bootstrap,
            topic.name,
            ctx.new_group("io-quix"),
            sample,
            handler_s,
            version,
        )
    )
    nested.ratios_both("keyshared_vs_quixstreams", ks, quix)
    nested.ratios_both("quixstreams_vs_serial", quix, serial)
