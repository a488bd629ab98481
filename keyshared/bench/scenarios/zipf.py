"""``zipf``: skewed keys, where per-key order puts a floor under the run time.

Keys follow a Zipf law (s = 1.1 over 10k keys), so the hottest key holds about 15% of the
records. Its records must run one after another, so no ordered consumer can finish sooner than
``hottest key's records x L``; the other bound is W/L over all records. keyshared is measured
against the tighter of the two, and a plain serial consumer (sampled) gives the speed-up.
"""

from __future__ import annotations

from keyshared.bench.contenders import run_keyshared, run_serial
from keyshared.bench.context import BenchContext
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.bench.workload import hottest, produce, zipf_keys

__all__ = ["run_zipf"]

ZIPF_S = 1.1


@register("zipf", "Zipf s=1.1 over 10k keys: keyshared vs the bound set by the hottest key")
def run_zipf(ctx: BenchContext) -> ScenarioResult:
    workers = ctx.workers or 64
    handler_s = (ctx.handler_ms if ctx.handler_ms is not None else 5.0) / 1000
    records = ctx.records or ctx.size(20_000, 2_000)
    key_count = 10_000
    keys = zipf_keys(records, key_count, ZIPF_S)
    hot_key, hot_count = hottest(keys)
    result = ScenarioResult(
        "zipf",
        f"Zipf s={ZIPF_S} keys on 1 partition: keyshared vs the hottest key's serial time",
        {
            "partitions": 1,
            "keys": key_count,
            "records": records,
            "workers": workers,
            "handler_ms": handler_s * 1000,
            "zipf_s": ZIPF_S,
            "hottest_key": hot_key.decode(),
            "hottest_key_records": hot_count,
            "distinct_keys": len(set(keys)),
        },
    )
    topic = ctx.new_topic("zipf", 1)
    produce(ctx.bootstrap, topic, keys)
    hot_bound_s = hot_count * handler_s
    width_bound_s = records * handler_s / workers
    bound = result.add(
        Measurement(
            "bound: max(hottest key x L, N x L / W)",
            kind="bound",
            value=records / max(hot_bound_s, width_bound_s),
            extra={"hottest_key_seconds": hot_bound_s, "width_seconds": width_bound_s},
        )
    )
    ctx.say(f"zipf: {records} records, hottest key {hot_count} records; keyshared")
    ks = result.add(
        run_keyshared(ctx.bootstrap, topic, ctx.new_group("zipf-ks"), records, handler_s, workers)
    )
    ctx.say("zipf: plain serial consumer (sample)")
    serial = result.add(
        run_serial(
            ctx.bootstrap, topic, ctx.new_group("zipf-serial"), max(100, records // 40), handler_s
        )
    )
    result.ratio("keyshared_vs_hot_key_bound", ks.figure, bound.figure)
    result.ratio("keyshared_vs_serial", ks.figure, serial.figure)
    result.notes.append(
        f"hottest key {hot_key.decode()} has {hot_count} records = {hot_bound_s:.1f} s of "
        f"serial work; keyshared took {ks.seconds:.1f} s for all {records}"
    )
    return result
