"""``batch``: batch handlers (``batch_size``), with nothing to do and with a database to write.

Three comparisons, on one topic, each contender with a fresh group from the beginning:

- **No-op batches against the raw loop.** keyshared with a batch handler that does nothing,
  against the bare ``consume(1000)`` loop of ``noop`` (the ceiling of any Python consumer
  here), and against keyshared's own single-record no-op handler: how much of keyshared's
  per-record cost batching takes away. Best of several alternating runs, as in ``noop``.
- **SQLite, one transaction per batch against one per record** (:mod:`keyshared.bench.
  sqlite_sink`): the same records written to a WAL database by the same keyshared consumer,
  once with a single-record handler that commits each record, once with a batch handler that
  writes each batch with ``executemany`` in one transaction. The figure batches exist for.
- **Confluent Parallel Consumer's batch mode** (``batchSize``, same size, no-op handler,
  keyshared's worker count as its concurrency), when installed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from keyshared.bench.against_raw import alternate_with_raw
from keyshared.bench.contenders import BenchError, run_keyshared, run_keyshared_batches
from keyshared.bench.context import BenchContext
from keyshared.bench.peers import parallel_consumer as pc
from keyshared.bench.peers.common import PeerRunError
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.bench.sqlite_sink import SqliteSink
from keyshared.bench.workload import produce, uniform_keys

__all__ = ["run_batch"]

BATCH_SIZE = 500  # records per call at most; what a bulk database write would take
SQLITE_WORKERS = 4  # SQLite has one writer: more threads only wait on its lock


@register(
    "batch",
    "batch handlers: no-op batches vs a raw consume(1000) loop, SQLite per batch vs per "
    "record, Parallel Consumer's batch mode",
)
def run_batch(ctx: BenchContext) -> ScenarioResult:
    workers = ctx.workers or 4
    # --quick: SQLite's transaction per record pays an fsync per record, 1.7 s for 5,000 in CI
    # and 10 s under load; 1,000 still fill several batches of up to 500 to compare with it.
    records = ctx.records or ctx.size(200_000, 5_000)
    sqlite_records = min(records, ctx.size(50_000, 1_000))
    raw_runs, batch_runs = ctx.size(3, 1), ctx.size(2, 1)
    partitions, key_count = 3, 10_000
    result = ScenarioResult(
        "batch",
        "batch handlers: keyshared's no-op batches vs a raw consume(1000) loop, SQLite writes "
        "per batch vs per record, Parallel Consumer's batch mode",
        {
            "partitions": partitions,
            "keys": key_count,
            "records": records,
            "sqlite_records": sqlite_records,
            "workers": workers,
            "batch_size": BATCH_SIZE,
            "runs": {"raw": raw_runs, "keyshared_batch": batch_runs},
        },
    )
    topic = ctx.new_topic("batch", partitions)
    produce(ctx.bootstrap, topic, uniform_keys(records, key_count))

    def batch_run(run: int) -> Measurement:
        ctx.say(f"batch: keyshared no-op batches of <= {BATCH_SIZE}, run {run + 1}")
        return run_keyshared_batches(
            ctx.bootstrap,
            topic,
            ctx.new_group("batch-ks"),
            records,
            workers,
            BATCH_SIZE,
            label=f"keyshared no-op batches of <= {BATCH_SIZE} ({workers} workers)",
        )

    runs = alternate_with_raw(ctx, "batch", topic, records, (raw_runs, batch_runs), batch_run)
    raw = result.add(runs.raw)
    batch = result.add(runs.other)
    ctx.say("batch: keyshared single-record no-op handler")
    single = result.add(
        run_keyshared(
            ctx.bootstrap,
            topic,
            ctx.new_group("batch-single"),
            records,
            0.0,
            workers,
            label=f"keyshared no-op, one record per call ({workers} workers)",
        )
    )
    result.goal(
        "batch_noop_vs_raw",
        result.ratio("batch_noop_vs_raw", batch.figure, raw.figure),
        0.7,
        at_least=True,
    )
    result.ratio("batch_noop_vs_single_record", batch.figure, single.figure)

    with tempfile.TemporaryDirectory(prefix="keyshared-bench-sqlite-") as folder:
        per_batch = _sqlite(ctx, topic, sqlite_records, Path(folder) / "batch.db", batched=True)
        per_record = _sqlite(ctx, topic, sqlite_records, Path(folder) / "record.db", batched=False)
    result.add(per_batch)
    result.add(per_record)
    result.goal(
        "sqlite_batch_vs_per_record",
        result.ratio("sqlite_batch_vs_per_record", per_batch.figure, per_record.figure),
        5.0,
        at_least=True,
    )

    _parallel_consumer_batches(ctx, result, topic, records, workers, batch.figure)
    result.notes.append(runs.note("keyshared batch"))
    result.notes.append(
        f"keyshared with no-op batches costs about {1e6 / batch.figure - 1e6 / raw.figure:.1f} "
        f"us per record more than reading it (one record per call: "
        f"{1e6 / single.figure - 1e6 / raw.figure:.1f} us)"
    )
    return result


def _sqlite(
    ctx: BenchContext, topic: str, records: int, path: Path, *, batched: bool
) -> Measurement:
    """keyshared writing ``records`` records to a fresh SQLite file, per batch or per record."""
    sink = SqliteSink(path)
    try:
        if batched:
            ctx.say(f"batch: SQLite, one transaction per batch of <= {BATCH_SIZE}")
            measured = run_keyshared_batches(
                ctx.bootstrap,
                topic,
                ctx.new_group("batch-sqlite"),
                records,
                SQLITE_WORKERS,
                BATCH_SIZE,
                sink.write_batch,
                label=f"keyshared + SQLite, executemany per batch of <= {BATCH_SIZE} "
                f"({SQLITE_WORKERS} workers)",
            )
        else:
            ctx.say("batch: SQLite, one transaction per record")
            measured = run_keyshared(
                ctx.bootstrap,
                topic,
                ctx.new_group("batch-sqlite-1"),
                records,
                0.0,
                SQLITE_WORKERS,
                on_record=sink.write_one,
                label=f"keyshared + SQLite, one transaction per record ({SQLITE_WORKERS} workers)",
            )
        measured.extra["rows"] = rows = sink.rows()
        if rows < measured.records:  # every handled record must be in the database
            raise BenchError(f"{measured.label}: {rows} rows for {measured.records} records")
    finally:
        sink.close()
    return measured


def _parallel_consumer_batches(
    ctx: BenchContext,
    result: ScenarioResult,
    topic: str,
    records: int,
    workers: int,
    keyshared_figure: float,
) -> None:
    """PC in batch mode on the same topic, or a note saying why not."""
    if not ctx.parallel_consumer:
        result.notes.append("Confluent Parallel Consumer: skipped (--no-parallel-consumer)")
        return
    install = pc.parallel_consumer_install()
    if install is None:
        result.notes.append(pc.skip_note())
        return
    ctx.say(f"batch: Confluent Parallel Consumer {install.version}, batchSize {BATCH_SIZE}")
    try:
        timing = pc.run_parallel_consumer(
            install,
            ctx.bootstrap,
            topic,
            ctx.new_group("batch-pc"),
            records,
            0.0,
            workers,
            batch_size=BATCH_SIZE,
        )
    except PeerRunError as exc:
        result.notes.append(f"Confluent Parallel Consumer (batch mode) failed, no figure: {exc}")
        return
    measured = result.add(
        timing.measurement(
            f"Confluent Parallel Consumer {install.version} batch mode (KEY order, batchSize "
            f"{BATCH_SIZE}, maxConcurrency {workers})",
            version=install.version,
            batch_size=BATCH_SIZE,
            concurrency=workers,
        )
    )
    result.ratio("batch_noop_vs_parallel_consumer_batch", keyshared_figure, measured.figure)
