"""Where a Spark DLQ replay spends its time: the figures of docs/benchmarks.md, "Spark replay
speed". Uses the dev cluster (started if needed) and the dead letters of ``bench replay``.

    python docs/scripts/spark_replay_profile.py stages            # cumulative stage timings
    python docs/scripts/spark_replay_profile.py writer            # cProfile of the Python writer
    python docs/scripts/spark_replay_profile.py replay 'local[1]' # one cold replay, like the bench

Run it from the checkout measured (Spark's Python workers import from the current directory).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console

from keyshared.bench.context import BenchContext
from keyshared.bench.scenarios.replay import _PARTITIONS, _spark_run, _write_dlq
from keyshared.demo.cluster import choose_cluster
from keyshared.spark import plan_replay, read_dlq, replay
from keyshared.spark.session import spark_session
from keyshared.spark.txn import TransactionSettings

RECORDS = int(os.environ.get("RECORDS", "200000"))  # smaller for a smoke run


def _timed(label: str, fn: Callable[[], Any]) -> None:
    began = time.perf_counter()
    fn()
    seconds = time.perf_counter() - began
    print(f"{label:50s} {seconds:7.2f}s  {RECORDS / seconds:9.0f} records/s", flush=True)


def _stages(spark: Any, ctx: BenchContext, dlq: str, source: str) -> None:
    def noop(df: Any) -> None:
        df.write.format("noop").mode("overwrite").save()

    columns = ("key", "value", "headers", "dlq_offset")
    _timed("Kafka source only", lambda: noop(read_dlq(spark, ctx.bootstrap, dlq).select(*columns)))
    # user_headers (a lambda, never computed by a replay) is dropped from what the sink writes
    _timed(
        "+ decoding",
        lambda: noop(read_dlq(spark, ctx.bootstrap, dlq).drop("user_headers")),
    )
    _timed(
        "+ whole-key plan",
        lambda: noop(
            plan_replay(read_dlq(spark, ctx.bootstrap, dlq), to_topic=source).drop("user_headers")
        ),
    )
    target = ctx.new_topic("prof-tgt", _PARTITIONS)
    _timed(
        "replay() whole",
        lambda: replay(
            plan_replay(read_dlq(spark, ctx.bootstrap, dlq), to_topic=target),
            ctx.bootstrap,
            partitions=4,
        ),
    )


def main(mode: str, master: str) -> None:
    ctx = BenchContext(choose_cluster(None, None, Console(stderr=True)).bootstrap)
    try:
        source, dlq = ctx.new_topic("prof-src", _PARTITIONS), ctx.new_topic("prof-dlq", _PARTITIONS)
        _write_dlq(ctx.bootstrap, dlq, source, RECORDS, 2_000)
        if mode == "replay":  # the bench's own run, on another master
            import keyshared.spark.session as session

            chosen = session.spark_session
            session.spark_session = lambda _m, **kw: chosen(master, **kw)  # type: ignore[assignment]
            result, start = _spark_run(ctx.bootstrap, dlq, ctx.new_topic("prof-tgt", 3), RECORDS)
            print(
                f"{master}: {result.records} in {result.seconds:.1f}s "
                f"({result.records / result.seconds:.0f} records/s), start {start:.1f}s"
            )
            return
        spark = spark_session(master, app_name="keyshared replay profile", shuffle_partitions=4)
        spark.range(1).count()
        if mode == "stages":

            def noop(df: Any) -> None:
                df.write.format("noop").mode("overwrite").save()

            for run in ("first pass", "second pass"):  # the second in a warm JVM
                print(run)
                _stages(spark, ctx, dlq, source)
            return
        from pyspark.sql import functions as F

        writer = sys.modules["keyshared.spark.replay"]
        todo = plan_replay(read_dlq(spark, ctx.bootstrap, dlq), to_topic=source)
        table = (
            todo.filter(F.col("outcome") == "replay")
            .select(*writer._WRITE_COLUMNS, "key_group")
            .repartition(4, "key_group")
            .sortWithinPartitions("source_topic", "source_partition", "source_offset")
            .drop("key_group")
            .toArrow()
        )
        settings = TransactionSettings("replay", "profile", {"bootstrap.servers": ctx.bootstrap})
        profile = cProfile.Profile()
        profile.enable()
        for _ in writer._write_task(iter(table.to_batches(10_000)), settings, 0, None):
            pass
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)
    finally:
        ctx.close()


if __name__ == "__main__":
    main(
        sys.argv[1] if len(sys.argv) > 1 else "stages",
        sys.argv[2] if len(sys.argv) > 2 else "local[2]",
    )
