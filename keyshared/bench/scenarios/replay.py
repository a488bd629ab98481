"""``replay``: records/s of the Spark DLQ replay on ``local[2]`` against a plain Python loop.

Both replay the same DLQ, in the same run, to fresh topics with the source's partitions:

* **Spark**: ``keyshared.spark`` as ``keyshared dlq replay`` runs it: read with Spark's Kafka
  source, decode provenance, decide whole keys, repartition by key, sort by source offset, and
  write with one transactional producer per task (4 tasks on 2 cores). The Spark session's
  start is reported apart and not in the rate; planning is in it.
* **Python loop**: one process, one confluent-kafka consumer and one idempotent producer:
  read every dead letter in DLQ order, strip ``keyshared.*`` headers, produce to the source
  partition. It keeps each key's order only because one DLQ partition per source partition
  keeps source order; it checks no whole-key filter, no parked key, no duplicate, and is not
  safe to retry, which is what the Spark job pays for.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from keyshared.bench.context import BenchContext
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.bench.workload import key_name

__all__ = ["run_replay"]

_PARTITIONS = 3
_PAD = b"x" * 80


@register("replay", "DLQ replay: Spark local[2] (keyshared.spark) vs a plain Python loop")
def run_replay(ctx: BenchContext) -> ScenarioResult:
    records = ctx.records or ctx.size(200_000, 5_000)
    key_count = 2_000
    result = ScenarioResult(
        "replay",
        "DLQ replay in per-key order: Spark on local[2] against a single-process Python "
        "consume-and-produce loop over the same DLQ",
        {"records": records, "keys": key_count, "partitions": _PARTITIONS, "master": "local[2]"},
    )
    source = ctx.new_topic("replay-src", _PARTITIONS)
    dlq = ctx.new_topic("replay-dlq", _PARTITIONS)
    ctx.say(f"replay: writing {records} dead letters of {key_count} keys to {dlq}")
    _write_dlq(ctx.bootstrap, dlq, source, records, key_count)

    ctx.say("replay: plain Python loop")
    python_target = ctx.new_topic("replay-py", _PARTITIONS)
    python = result.add(_python_loop(ctx.bootstrap, dlq, python_target, records))

    ctx.say("replay: Spark local[2] (session start excluded)")
    spark_target = ctx.new_topic("replay-spark", _PARTITIONS)
    spark, start_s = _spark_run(ctx.bootstrap, dlq, spark_target, records)
    result.add(spark)
    result.ratio("spark_vs_python_loop", spark.figure, python.figure)
    result.notes.append(f"Spark session start: {start_s:.1f}s (not in the rate)")
    result.notes.append(
        "the Spark job also decodes provenance, decides whole keys, dedups redeliveries and "
        "writes one transaction per task (retry-safe); the loop does none of that"
    )
    return result


def _write_dlq(bootstrap: str, dlq: str, source: str, records: int, key_count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20, "batch.num.messages": 10_000})  # fmt: skip
    now = str(int(time.time() * 1000)).encode()
    topic = source.encode()
    for i in range(records):
        k = i % key_count
        partition = k % _PARTITIONS
        headers: list[tuple[str, str | bytes | None]] = [
            ("keyshared.source.topic", topic),
            ("keyshared.source.partition", str(partition).encode()),
            ("keyshared.source.offset", str(i).encode()),
            ("keyshared.group", b"bench"),
            ("keyshared.reason", b"exhausted" if i < key_count else b"parked"),
            ("keyshared.error.class", b"bench.Failure" if i < key_count else b""),
            ("keyshared.failure.last", now),
        ]
        while True:
            try:
                producer.produce(dlq, key=key_name(k), value=_PAD, headers=headers,
                                 partition=partition)  # fmt: skip
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)


def _python_loop(bootstrap: str, dlq: str, target: str, records: int) -> Measurement:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"{target}-loop", "enable.auto.commit": False,
        "enable.partition.eof": True,
    })  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})  # fmt: skip
    consumer.assign([TopicPartition(dlq, p, 0) for p in range(_PARTITIONS)])
    began = time.perf_counter()
    done, ended = 0, 0
    run = f"loop-{int(time.time())}".encode()
    while ended < _PARTITIONS:
        for msg in consumer.consume(1000, 1.0):
            err = msg.error()
            if err is not None:
                ended += err.code() == KafkaError._PARTITION_EOF
                continue
            headers: Any = msg.headers() or []
            partition = next(int(v) for k, v in reversed(headers)
                             if k == "keyshared.source.partition")  # fmt: skip
            kept = [(k, v) for k, v in headers if not k.startswith("keyshared.")]
            kept.append(("keyshared.replay.run", run))
            while True:
                try:
                    producer.produce(target, key=msg.key(), value=msg.value(), headers=kept,
                                     partition=partition)  # fmt: skip
                    break
                except BufferError:
                    producer.poll(0.1)
            done += 1
        producer.poll(0)
    producer.flush(120)
    seconds = time.perf_counter() - began
    consumer.close()
    return Measurement("python loop (1 process)", done, seconds,
                       extra={"expected": records})  # fmt: skip


def _spark_run(bootstrap: str, dlq: str, target: str, records: int) -> tuple[Measurement, float]:
    from keyshared.spark import plan_replay, read_dlq, replay
    from keyshared.spark.session import spark_session

    began = time.perf_counter()
    spark = spark_session("local[2]", app_name="keyshared bench replay", shuffle_partitions=4)
    spark.range(1).count()  # the first job pays for the Python workers' start
    start_s = time.perf_counter() - began
    began = time.perf_counter()
    result = replay(plan_replay(read_dlq(spark, bootstrap, dlq), to_topic=target), bootstrap,
                    partitions=4)  # fmt: skip
    seconds = time.perf_counter() - began
    return (
        Measurement("spark local[2] (keyshared.spark)", result.written, seconds,
                    extra={"expected": records, "run_id": result.run_id}),
        start_s,
    )  # fmt: skip
