"""``eos``: consume -> transform -> produce, at-least-once against exactly-once, same topic.

The handler is the same in every run: a short I/O wait (``handler_s``) and one output message
per record. At-least-once, it produces with a plain idempotent producer of its own; exactly
once, through ``record.output``, so its outputs go out in one Kafka transaction per commit
interval with the offsets (see docs/guarantees.md, "Exactly-once outputs").

Both are timed where it matters to a downstream reader: from the first output a handler wrote
to the last one a ``read_committed`` consumer of the output topic can read. A transactional
output becomes
visible only when its transaction commits, so this window includes the cost of the last commit
and every transaction on the way. Each output carries the wall time its handler wrote it, so
the reader also gets each output's latency: exactly-once adds up to a commit interval (outputs
wait for the next commit), which the run at a short interval shows.
"""

from __future__ import annotations

import statistics
import struct
import threading
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from keyshared.bench.contenders import run_keyshared
from keyshared.bench.context import BenchContext
from keyshared.bench.peers.common import PeerRunError
from keyshared.bench.peers.parallel_consumer import (
    parallel_consumer_install,
    run_parallel_consumer,
    skip_note,
)
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.bench.workload import produce, uniform_keys
from keyshared.kafka.client_config import KEYED_PRODUCER
from keyshared.record import Record

__all__ = ["run_eos"]

_T = "t"  # header: the wall time the handler wrote the output (a big-endian double)


@register("eos", "consume -> produce: exactly-once (transactions) vs at-least-once, same handler")
def run_eos(ctx: BenchContext) -> ScenarioResult:
    workers = ctx.workers or 64
    records = ctx.records or ctx.size(60_000, 6_000)
    partitions, key_count, handler_s = 3, 10_000, 0.002
    fast = 0.1
    result = ScenarioResult(
        "eos",
        "consume -> transform -> produce: exactly-once outputs against at-least-once",
        {
            "partitions": partitions,
            "keys": key_count,
            "records": records,
            "workers": workers,
            "handler_ms": handler_s * 1000,
            "commit_interval_s": {"default": 1.0, "short": fast},
            "runs": ctx.size(2, 1),
        },
    )
    topic = ctx.new_topic("eos", partitions)
    produce(ctx.bootstrap, topic, uniform_keys(records, key_count))
    contenders = (
        ("at-least-once, own producer", False, 1.0),
        ("exactly-once, commit every 1 s", True, 1.0),
        (f"exactly-once, commit every {fast:g} s", True, fast),
    )
    measured: list[list[Measurement]] = [[] for _ in contenders]
    rounds = ctx.size(2, 1)
    for round_ in range(rounds):  # alternate, so drift on a shared machine hits all alike
        for i, (label, exactly_once, interval) in enumerate(contenders):
            ctx.say(f"eos: {records} records on {topic}; {label}, run {round_ + 1}")
            out = ctx.new_topic("eos-out", partitions)
            measured[i].append(
                _measure(
                    ctx, topic, out, records, workers, handler_s, label, exactly_once, interval
                )
            )
    runs = [result.add(_best(m)) for m in measured]
    alo, eos, eos_fast = runs
    _add_parallel_consumer(ctx, result, topic, records, workers, handler_s, partitions, eos)
    result.ratio("eos_vs_at_least_once", eos.figure, alo.figure)
    result.ratio("eos_short_interval_vs_at_least_once", eos_fast.figure, alo.figure)
    result.goal("eos_vs_at_least_once", eos.figure / max(alo.figure, 1e-9), 0.8, at_least=True)
    for m in runs:
        result.notes.append(
            f"{m.label}: {m.figure:,.0f} outputs/s, output latency p50 "
            f"{m.extra['latency_p50_ms']:.0f} ms, p99 {m.extra['latency_p99_ms']:.0f} ms"
        )
    result.notes.append(f"best of {rounds} alternating runs of each contender")
    result.notes.append(
        "exactly-once outputs become readable only with the commit after their record "
        "finished: the commit interval sets their latency, plus the transaction's own time "
        "(producing and flushing an interval's outputs) under load"
    )
    return result


def _add_parallel_consumer(
    ctx: BenchContext,
    result: ScenarioResult,
    topic: str,
    records: int,
    workers: int,
    handler_s: float,
    partitions: int,
    keyshared_eos: Measurement,
) -> None:
    """Parallel Consumer's consume -> produce, plain and transactional, on the same topic and
    timed by the same reader (when its jars are installed: ``keyshared bench --install-peers``)."""
    install = parallel_consumer_install()
    if install is None:
        result.notes.append(skip_note())
        return
    pc: dict[bool, Measurement] = {}
    for transactional in (False, True):
        label = f"parallel-consumer {install.version}, " + (
            "PERIODIC_TRANSACTIONAL_PRODUCER" if transactional else "asynchronous commits"
        )
        ctx.say(f"eos: {label}")
        out = ctx.new_topic("eos-out", partitions)
        reader = _OutputReader(ctx.bootstrap, out, records)
        reader.start()
        try:
            run_parallel_consumer(install, ctx.bootstrap, topic, ctx.new_group("eos-pc"),
                                  records, handler_s, workers, timeout=300, output=out,
                                  transactional=transactional)  # fmt: skip
            m = pc[transactional] = result.add(reader.measurement(label, timeout=120))
            result.notes.append(
                f"{label}: {m.figure:,.0f} outputs/s, output latency p50 "
                f"{m.extra['latency_p50_ms']:.0f} ms, p99 {m.extra['latency_p99_ms']:.0f} ms"
            )
        except (PeerRunError, RuntimeError) as exc:
            reader.stop()
            result.notes.append(f"{label}: failed ({exc})")
    if True in pc:
        result.ratio("keyshared_eos_vs_pc_transactional", keyshared_eos.figure, pc[True].figure)
    if True in pc and False in pc:
        result.ratio("pc_transactional_vs_pc_plain", pc[True].figure, pc[False].figure)


def _best(runs: list[Measurement]) -> Measurement:
    best = max(runs, key=lambda m: m.figure)
    best.extra["runs"] = [round(m.figure) for m in runs]
    return best


def _measure(
    ctx: BenchContext,
    topic: str,
    out: str,
    records: int,
    workers: int,
    handler_s: float,
    label: str,
    exactly_once: bool,
    interval: float,
) -> Measurement:
    reader = _OutputReader(ctx.bootstrap, out, records)
    reader.start()
    producer = None
    if not exactly_once:
        producer = Producer(
            {"bootstrap.servers": ctx.bootstrap, "enable.idempotence": True, "linger.ms": 5,
             **KEYED_PRODUCER}
        )  # fmt: skip
    sent = [0]

    def write(record: Record) -> None:
        now = time.time()
        headers: list[tuple[str, str | bytes | None]] = [(_T, struct.pack(">d", now))]
        if record.output is not None:
            record.output.produce(out, key=record.raw_key, value=record.value, headers=headers)
            return
        assert producer is not None
        while True:
            try:
                producer.produce(out, key=record.raw_key, value=record.value, headers=headers)
                break
            except BufferError:
                producer.poll(0.01)
        sent[0] += 1
        if not sent[0] & 255:
            producer.poll(0)

    run_keyshared(
        ctx.bootstrap,
        topic,
        ctx.new_group("eos"),
        records,
        handler_s,
        workers,
        label=label,
        on_record=write,
        exactly_once=exactly_once,
        commit_interval=interval,
    )
    if producer is not None:
        producer.flush(60)
    return reader.measurement(label, timeout=120)


class _OutputReader:
    """A read_committed reader of the output topic: when each output became readable."""

    def __init__(self, bootstrap: str, topic: str, expected: int) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"eos-reader-{time.monotonic_ns()}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        partitions = self._consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self._consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        self._expected = expected
        self._latencies: list[float] = []
        self._last = 0.0
        self._earliest = float("inf")
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="eos-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._done.is_set():
                for msg in self._consumer.consume(1000, 0.1):
                    if msg.error() is not None:
                        continue
                    now = self._last = time.time()
                    stamp = dict(msg.headers() or ()).get(_T)
                    written = struct.unpack(">d", stamp)[0] if isinstance(stamp, bytes) else now
                    self._earliest = min(self._earliest, written)
                    self._latencies.append(now - written)
                if len(self._latencies) >= self._expected:
                    self._done.set()
        finally:
            self._consumer.close()

    def stop(self) -> None:
        self._done.set()
        self._thread.join(10)

    def measurement(self, label: str, timeout: float) -> Measurement:
        """Outputs per second from the first handler's write (the earliest stamp) to the last
        output readable."""
        self._done.wait(timeout)
        self._done.set()
        self._thread.join(10)
        got = len(self._latencies)
        if got < self._expected:
            raise RuntimeError(f"{label}: only {got} of {self._expected} outputs were readable")
        ordered = sorted(self._latencies)
        extra: dict[str, Any] = {
            "latency_p50_ms": round(statistics.median(ordered) * 1000, 1),
            "latency_p99_ms": round(ordered[int(0.99 * (len(ordered) - 1))] * 1000, 1),
        }
        return Measurement(label, got, max(self._last - self._earliest, 1e-6), extra=extra)
