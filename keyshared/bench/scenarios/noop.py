"""``noop``: a handler that does nothing, so only keyshared's own cost per record shows.

The baseline is the ceiling of any Python consumer on this machine: a bare confluent-kafka
``consume(1000)`` loop on the same topic that touches each record and does nothing else. The
ratio says how much of that ceiling is left once records go through windows, the ring, worker
threads and safe commits.
"""

from __future__ import annotations

from keyshared.bench.contenders import run_keyshared, run_raw
from keyshared.bench.context import BenchContext
from keyshared.bench.registry import register
from keyshared.bench.result import ScenarioResult
from keyshared.bench.workload import produce, uniform_keys

__all__ = ["run_noop"]


@register("noop", "no-op handler: keyshared vs a raw consume(1000) loop (the ceiling)")
def run_noop(ctx: BenchContext) -> ScenarioResult:
    workers = ctx.workers or 16
    records = ctx.records or ctx.size(200_000, 20_000)
    partitions, key_count = 3, 10_000
    result = ScenarioResult(
        "noop",
        "no-op handler: keyshared's own per-record cost against a bare consume(1000) loop",
        {"partitions": partitions, "keys": key_count, "records": records, "workers": workers},
    )
    topic = ctx.new_topic("noop", partitions)
    produce(ctx.bootstrap, topic, uniform_keys(records, key_count))
    ctx.say(f"noop: {records} records on {topic}; raw consume loop")
    raw = result.add(run_raw(ctx.bootstrap, topic, ctx.new_group("noop-raw"), records))
    ctx.say("noop: keyshared")
    ks = result.add(
        run_keyshared(ctx.bootstrap, topic, ctx.new_group("noop-ks"), records, 0.0, workers)
    )
    result.ratio("keyshared_vs_raw", ks.figure, raw.figure)
    result.notes.append(
        f"keyshared costs about {1e6 / ks.figure - 1e6 / raw.figure:.1f} us per record more "
        "than reading it (the price of per-key order and safe commits)"
    )
    return result
