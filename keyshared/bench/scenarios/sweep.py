"""``sweep``: records/s against handler latency, per-key ordered, as the field publishes it.

8 partitions; 1,000 and 10,000 keys; a handler of 0, 1, 10 and 100 ms. At each point, on the
same topic, in steady state (middle 90 % of completions):

- keyshared with a sync handler in threads (16 / 64 / 256 / 1,000 threads for 0 / 1 / 10 /
  100 ms: what covers the latency) and with an ``async def`` handler (1,000 at once);
- Confluent Parallel Consumer, ``ProcessingOrder.KEY``, at the thread count and at 1,000
  (``maxConcurrency``), its better run reported;
- pyrallel-consumer, async mode, 1,000 in flight, ``key_hash`` order;
- a share-group consumer (confluent-kafka's ``ShareConsumer``, KIP-932), unordered: what Kafka
  itself offers for more parallelism than partitions, with the keyshared thread count;
- a bare Python thread pool with the keyshared thread count, unordered, no safe commit: not a
  peer but CPython's own ceiling for a sync handler here, so that a gap to a JVM peer shows
  whether keyshared or the interpreter sets it.

The handler: nothing (threads, share consumer) or ``await asyncio.sleep(0)`` (async) at 0 ms,
``time.sleep(L)`` / ``await asyncio.sleep(L)`` above. Each run reads as many records as keep
it busy for about 8 s (1.5 s under ``--quick``; :mod:`keyshared.bench.sweep_plan`), from a
topic with more records than any run reads, so no run's tail waits for records that never come.
Besides the usual result, the sweep writes ``sweep-table.md`` and ``sweep-latency.png`` into
the results folder (:mod:`keyshared.bench.sweep_report`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from keyshared.bench import bounds
from keyshared.bench.contenders import BenchError, run_keyshared, run_thread_pool
from keyshared.bench.context import BenchContext
from keyshared.bench.peers import parallel_consumer as pc
from keyshared.bench.peers import pyrallel
from keyshared.bench.peers.common import PeerRunError
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult, steady_name
from keyshared.bench.scenarios.async_io import run_async_keyshared
from keyshared.bench.share_consumer import MEMBERS, run_share_consumer
from keyshared.bench.sweep_plan import (
    ASYNC_CONCURRENCY,
    KEYSHARED_ASYNC,
    KEYSHARED_THREADS,
    LATENCIES_MS,
    PARALLEL_CONSUMER,
    PARTITIONS,
    PYRALLEL,
    PYTHON_POOL,
    SHARE_CONSUMER,
    Point,
    pc_concurrencies,
    records_for,
    sweep_plan,
)
from keyshared.bench.sweep_report import SweepRow, markdown_table, write_sweep_chart
from keyshared.bench.workload import produce, uniform_keys

__all__ = ["run_sweep"]

PADDING = 0.05  # records beyond the largest run, so no run's last fetch comes up empty
SHARE_GOAL = 0.9  # keyshared within 0.9 of the share consumer, per the issue


@register(
    "sweep",
    "8 partitions, 1k/10k keys x 0/1/10/100 ms: keyshared vs ordered peers + share",
    in_full_run=False,
)
def run_sweep(ctx: BenchContext) -> ScenarioResult:
    latencies = LATENCIES_MS if ctx.handler_ms is None else (ctx.handler_ms,)
    plan = sweep_plan(ctx.quick, latencies)
    result = ScenarioResult(
        "sweep",
        "records/s in steady state against handler latency, 8 partitions, per-key order: "
        "keyshared (threads, async) vs Parallel Consumer, pyrallel and a share consumer",
        {
            "partitions": PARTITIONS,
            "points": [point.name for point in plan.points],
            "seconds_per_run": plan.seconds,
            "async_concurrency": ASYNC_CONCURRENCY,
            "share_consumer_members": MEMBERS,
        },
    )
    peers = _Peers.find(ctx, result)
    rows: list[SweepRow] = []
    for keys in sorted({point.keys for point in plan.points}):
        points = [point for point in plan.points if point.keys == keys]
        topic = _produce_topic(ctx, keys, points, plan.seconds, peers)
        for point in points:
            rows.append(_race(ctx, result, peers, topic, point, plan.seconds))
    _summarise(result, rows)
    if ctx.out is not None:
        (ctx.out / "sweep-table.md").write_text(markdown_table(rows))
        write_sweep_chart(ctx.out / "sweep-latency.png", rows)
        result.notes.append(f"table: {ctx.out / 'sweep-table.md'}, chart: sweep-latency.png")
    return result


class _Peers:
    """Which peers run in this sweep (installed and not turned off), found once."""

    def __init__(self, pc_install: pc.PcInstall | None, pyrallel_version: str | None) -> None:
        self.pc = pc_install
        self.pyrallel = pyrallel_version

    @classmethod
    def find(cls, ctx: BenchContext, result: ScenarioResult) -> _Peers:
        install = None
        if not ctx.parallel_consumer:
            result.notes.append("Confluent Parallel Consumer: skipped (--no-parallel-consumer)")
        elif (install := pc.parallel_consumer_install()) is None:
            result.notes.append(pc.skip_note())
        version = None
        if not ctx.pyrallel:
            result.notes.append("pyrallel-consumer: skipped (--no-pyrallel)")
        elif (version := pyrallel.pyrallel_available(ctx.pyrallel_python)) is None:
            result.notes.append(pyrallel.skip_note(ctx.pyrallel_python))
        return cls(install, version)


def _runs(point: Point, seconds: float, peers: _Peers, threads: int) -> dict[str, int]:
    """Records each contender reads at ``point`` (Parallel Consumer: its largest run)."""
    keys, hs = point.keys, point.handler_s
    sizes = {
        KEYSHARED_THREADS: records_for(KEYSHARED_THREADS, threads, keys, hs, seconds),
        KEYSHARED_ASYNC: records_for(KEYSHARED_ASYNC, ASYNC_CONCURRENCY, keys, hs, seconds),
        SHARE_CONSUMER: records_for(SHARE_CONSUMER, threads, keys, hs, seconds),
        PYTHON_POOL: records_for(PYTHON_POOL, threads, keys, hs, seconds),
    }
    if peers.pc is not None:
        sizes[PARALLEL_CONSUMER] = max(
            records_for(PARALLEL_CONSUMER, c, keys, hs, seconds) for c in pc_concurrencies(threads)
        )
    if peers.pyrallel is not None:
        sizes[PYRALLEL] = records_for(PYRALLEL, ASYNC_CONCURRENCY, keys, hs, seconds)
    return sizes


def _produce_topic(
    ctx: BenchContext, keys: int, points: list[Point], seconds: float, peers: _Peers
) -> str:
    most = max(
        n for point in points for n in _runs(point, seconds, peers, _threads(ctx, point)).values()
    )
    total = round(most * (1 + PADDING)) + 1_000
    topic = ctx.new_topic(f"sweep-{keys}", PARTITIONS)
    ctx.say(f"sweep: producing {total:,} records over {keys:,} keys to {topic}")
    produce(ctx.bootstrap, topic, uniform_keys(total, keys))
    return topic


def _threads(ctx: BenchContext, point: Point) -> int:
    return ctx.workers or point.threads


def _race(
    ctx: BenchContext,
    result: ScenarioResult,
    peers: _Peers,
    topic: str,
    point: Point,
    seconds: float,
) -> SweepRow:
    threads = _threads(ctx, point)
    sizes = _runs(point, seconds, peers, threads)
    nested = result.shape(
        point.name,
        f"{point.keys:,} keys, 8 partitions, handler {point.latency_ms:g} ms",
        {
            "keys": point.keys,
            "handler_ms": point.latency_ms,
            "threads": threads,
            "records": sizes,
            # Threads take keys by hash (the ring): the busiest thread's share of the keys,
            # against the mean, is what a full window waits on (async mode schedules per key).
            "ring_balance": round(
                bounds.ring_balance(uniform_keys(point.keys, point.keys), threads), 3
            ),
        },
    )
    hs, tag = point.handler_s, f"sweep {point.name}"
    rates: dict[str, float | None] = {}
    concurrency: dict[str, int] = {}

    def run(contender: str, what: str, used: int, measure: Callable[[], Measurement]) -> None:
        ctx.say(f"{tag}: {what} ({sizes[contender]:,} records)")
        try:
            measurement = nested.add(measure())
        except (BenchError, PeerRunError, RuntimeError) as exc:
            if contender in (KEYSHARED_THREADS, KEYSHARED_ASYNC):
                raise
            nested.notes.append(f"{what} failed, no figure: {exc}")
            return
        rate = measurement.steady_figure
        if rate is not None and rate > (rates.get(contender) or 0.0):
            rates[contender], concurrency[contender] = rate, used

    def group(suffix: str) -> str:
        return ctx.new_group(f"sweep-{suffix}")

    run(
        KEYSHARED_THREADS,
        f"keyshared, {threads} threads",
        threads,
        lambda: run_keyshared(
            ctx.bootstrap, topic, group("ks"), sizes[KEYSHARED_THREADS], hs, threads
        ),
    )
    run(
        KEYSHARED_ASYNC,
        f"keyshared, async def, {ASYNC_CONCURRENCY} at once",
        ASYNC_CONCURRENCY,
        lambda: run_async_keyshared(
            ctx.bootstrap, topic, group("ks-async"), sizes[KEYSHARED_ASYNC], hs, ASYNC_CONCURRENCY
        ),
    )
    if peers.pc is not None:
        for max_concurrency in pc_concurrencies(threads):
            records = records_for(PARALLEL_CONSUMER, max_concurrency, point.keys, hs, seconds)
            run(
                PARALLEL_CONSUMER,
                f"Parallel Consumer {peers.pc.version}, KEY, maxConcurrency {max_concurrency}",
                max_concurrency,
                partial(
                    _parallel_consumer,
                    peers.pc,
                    ctx.bootstrap,
                    topic,
                    group("pc"),
                    records,
                    hs,
                    max_concurrency,
                ),
            )
    if peers.pyrallel is not None:
        version = peers.pyrallel
        run(
            PYRALLEL,
            f"pyrallel-consumer {version}, async, {ASYNC_CONCURRENCY} in flight",
            ASYNC_CONCURRENCY,
            lambda: pyrallel.run_pyrallel(
                ctx.pyrallel_python,
                "async",
                ctx.bootstrap,
                topic,
                group("pyrallel"),
                sizes[PYRALLEL],
                hs,
                ASYNC_CONCURRENCY,
            ).measurement(
                f"pyrallel-consumer {version} async (key_hash, {ASYNC_CONCURRENCY} in flight)",
                concurrency=ASYNC_CONCURRENCY,
            ),
        )
    run(
        SHARE_CONSUMER,
        f"share consumer, {MEMBERS} members, {threads} threads",
        threads,
        lambda: run_share_consumer(
            ctx.bootstrap, topic, group("share"), sizes[SHARE_CONSUMER], hs, threads
        ),
    )
    run(
        PYTHON_POOL,
        f"Python thread pool, {threads} threads, unordered (CPython's ceiling)",
        threads,
        lambda: run_thread_pool(
            ctx.bootstrap, topic, group("pool"), sizes[PYTHON_POOL], hs, threads
        ),
    )
    row = SweepRow(point, rates, concurrency)
    _ratios(nested, row)
    return row


def _parallel_consumer(
    install: pc.PcInstall,
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    handler_s: float,
    concurrency: int,
) -> Measurement:
    timing = pc.run_parallel_consumer(
        install, bootstrap, topic, group, records, handler_s, concurrency
    )
    return timing.measurement(
        f"Confluent Parallel Consumer {install.version} (KEY, maxConcurrency {concurrency})",
        concurrency=concurrency,
    )


def _ratios(nested: ScenarioResult, row: SweepRow) -> None:
    """The point's two ratios (steady state) and the goals they are held to."""
    peer = row.ratio_vs_best_ordered_peer()
    if peer is not None:
        nested.ratio(steady_name("keyshared_vs_best_ordered_peer"), peer, 1.0)
        nested.goal("keyshared_vs_best_ordered_peer", peer, 1.0, at_least=True, unit="x")
    share = row.ratio_vs_share_consumer()
    if share is not None:
        nested.ratio(steady_name("keyshared_vs_share_consumer"), share, 1.0)
        nested.goal("keyshared_vs_share_consumer", share, SHARE_GOAL, at_least=True, unit="x")
    pool = row.ratio_threads_vs_python_pool()
    if pool is not None:
        nested.ratio(steady_name("keyshared_threads_vs_python_pool"), pool, 1.0)
    best, fastest = row.keyshared(), row.best_ordered_peer()
    if best is not None and fastest is not None:
        nested.notes.append(
            f"keyshared's better mode: {best[0]}; fastest ordered peer: {fastest[0]}"
        )


def _summarise(result: ScenarioResult, rows: list[SweepRow]) -> None:
    """The worst point of each ratio at the top level, naming the point."""
    for name, pick in (
        ("keyshared_vs_best_ordered_peer", SweepRow.ratio_vs_best_ordered_peer),
        ("keyshared_vs_share_consumer", SweepRow.ratio_vs_share_consumer),
        ("keyshared_threads_vs_python_pool", SweepRow.ratio_threads_vs_python_pool),
    ):
        values = [(row.point.name, value) for row in rows if (value := pick(row)) is not None]
        if not values:
            continue
        where, worst = min(values, key=lambda item: item[1])
        result.ratio(f"worst_{steady_name(name)}", worst, 1.0)
        result.notes.append(f"{name} (steady state) is lowest at {where}: {worst:.2f}")
