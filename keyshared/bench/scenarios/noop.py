"""``noop``: a handler that does nothing, so only keyshared's own cost per record shows.

The baseline is the ceiling of any Python consumer on this machine: a bare confluent-kafka
``consume(1000)`` loop on the same topic that touches each record and does nothing else. The
ratio says how much of that ceiling is left once records go through windows, the ring, worker
threads and safe commits.

Both contenders run several times and the best run of each is compared. The raw loop reads the
topic in about a tenth of a second, so a single fetch stall of librdkafka (a ``consume`` call
that waits out its 0.2 s timeout for a full batch) divides its rate by ten; one run alone would
make the ratio a coin toss between the two regimes.

When installed, the peers (Confluent Parallel Consumer, pyrallel-consumer) run once each on the
same topic with a no-op handler and keyshared's worker count as their concurrency: what per-key
ordering costs in each library when the handler costs nothing.
"""

from __future__ import annotations

from keyshared.bench.against_raw import alternate_with_raw
from keyshared.bench.contenders import run_keyshared
from keyshared.bench.context import BenchContext
from keyshared.bench.peers import add_peers
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.bench.workload import produce, uniform_keys

__all__ = ["run_noop"]


@register("noop", "no-op handler: keyshared vs a raw consume(1000) loop (the ceiling)")
def run_noop(ctx: BenchContext) -> ScenarioResult:
    workers = ctx.workers or 16
    # --quick: 5,000, not more: pyrallel reads a no-op topic at about 2k records/s, so at
    # 20,000 its two modes alone took 18 s of CI's bench run, to show what 5,000 show.
    records = ctx.records or ctx.size(200_000, 5_000)
    raw_runs, keyshared_runs = ctx.size(3, 1), ctx.size(2, 1)
    partitions, key_count = 3, 10_000
    result = ScenarioResult(
        "noop",
        "no-op handler: keyshared's own per-record cost against a bare consume(1000) loop",
        {
            "partitions": partitions,
            "keys": key_count,
            "records": records,
            "workers": workers,
            "runs": {"raw": raw_runs, "keyshared": keyshared_runs},
        },
    )
    topic = ctx.new_topic("noop", partitions)
    produce(ctx.bootstrap, topic, uniform_keys(records, key_count))

    def keyshared_run(run: int) -> Measurement:
        ctx.say(f"noop: keyshared, run {run + 1}")
        group = ctx.new_group("noop-ks")
        return run_keyshared(ctx.bootstrap, topic, group, records, 0.0, workers)

    runs = alternate_with_raw(
        ctx, "noop", topic, records, (raw_runs, keyshared_runs), keyshared_run
    )
    raw = result.add(runs.raw)
    ks = result.add(runs.other)
    result.ratio("keyshared_vs_raw", ks.figure, raw.figure)
    add_peers(
        ctx,
        result,
        topic=topic,
        records=records,
        handler_s=0.0,
        concurrency=workers,
        keyshared=ks,
    )
    result.notes.append(runs.note("keyshared"))
    result.notes.append(
        f"keyshared costs about {1e6 / ks.figure - 1e6 / raw.figure:.1f} us per record more "
        "than reading it (the price of per-key order and safe commits)"
    )
    return result
