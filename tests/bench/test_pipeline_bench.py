"""keyshared's per-record path without a broker: admission, worker threads, settlement.

The ``noop`` scenario of ``keyshared bench`` measures the same path against a real broker, where
librdkafka's own threads and fetch stalls add noise. Here synthetic messages go through the
real ``Dispatcher`` → ``ThreadWorkers`` → ``RecordExecutor`` → ``SettlementBuffer``, the way the
poll loop feeds them, so a change to that path can be A/B-measured in seconds:

    pytest tests/bench/test_pipeline_bench.py --benchmark-enable

Run as a plain test (the default), each case also checks that every record finished once and
the partitions' safe cursors reached the end.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from keyshared.metrics import ConsumerMetrics
from keyshared.record import Record
from keyshared.runtime.dispatcher import Dispatcher
from keyshared.runtime.execution import RecordExecutor
from keyshared.runtime.partition import PartitionState
from keyshared.runtime.workers import ThreadWorkers
from keyshared.settings import ConsumerOptions

PARTITIONS = 3
BATCH = 1000  # what the poll loop asks consume() for
ROUND = 30_000  # records per benchmark round
KEYS = 10_000


class FakeMessage:
    """The part of confluent_kafka.Message that keyshared reads."""

    __slots__ = ("_key", "_offset", "_partition")

    def __init__(self, offset: int, key: bytes, partition: int) -> None:
        self._offset, self._key, self._partition = offset, key, partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return b"v" * 16

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def headers(self) -> None:
        return None

    def partition(self) -> int:
        return self._partition


class Pipeline:
    """The consumer's pipeline minus the poll loop's Kafka calls."""

    def __init__(self, workers: int) -> None:
        self.options = ConsumerOptions(workers=workers)
        self.finished = 0
        self.offsets_seen: set[tuple[int, int]] = set()
        self._target = 0
        self._done = threading.Event()
        self._lock = threading.Lock()
        executor: list[RecordExecutor] = []
        self.workers = ThreadWorkers(
            workers,
            lambda work: executor[0].run(work),
            on_idle=lambda: executor[0].settlements.flush_mine(),
        )
        self.dispatcher = Dispatcher(self.options, workers, self.workers.submit)
        metrics = ConsumerMetrics(f"bench-{uuid.uuid4().hex[:8]}", "m")
        self.states = [
            PartitionState("t", p, metrics.partition("t", p), committed=0)
            for p in range(PARTITIONS)
        ]
        self.executor = RecordExecutor(
            self.options,
            self.handle,
            self.dispatcher,
            lambda *_: None,
            None,
            None,  # type: ignore[arg-type]
        )
        executor.append(self.executor)
        self._next_offset = [0] * PARTITIONS

    def handle(self, record: Record) -> None:
        with self._lock:
            self.offsets_seen.add((record.partition, record.offset))
            self.finished += 1
            if self.finished >= self._target:
                self._done.set()

    def messages(self, count: int) -> Iterator[list[FakeMessage]]:
        """Batches as consume() returns them: partitions interleaved, offsets increasing."""
        batch: list[FakeMessage] = []
        for i in range(count):
            partition = i % PARTITIONS
            offset = self._next_offset[partition]
            self._next_offset[partition] += 1
            batch.append(FakeMessage(offset, b"key-%d" % (i % KEYS), partition))
            if len(batch) == BATCH:
                yield batch
                batch = []
        if batch:
            yield batch

    def run_round(self, count: int) -> None:
        """Admit ``count`` records like the poll loop does and wait until all finished."""
        self._done.clear()
        self._target = self.finished + count
        for batch in self.messages(count):
            by_partition: dict[int, list[Any]] = {}
            for message in batch:
                by_partition.setdefault(message.partition(), []).append(message)
            for partition, messages in by_partition.items():
                self.dispatcher.admit(self.states[partition], messages)
            self.executor.settlements.flush_stale()
            self.workers.nudge()
        while not self._done.wait(0.001):  # the poll loop's periodic care, while waiting
            self.executor.settlements.flush_stale()
            self.workers.nudge()

    def settled_cursors(self) -> list[int]:
        """Safe cursors once every success is settled: threads that run out of work settle
        what they hold, so waiting for the dispatcher to be drained is enough."""
        assert self.dispatcher.wait_drained(self.states, 30.0), "successes never settled"
        return [s.window.safe_cursor if s.window else -1 for s in self.states]

    def close(self) -> None:
        self.workers.close()


@pytest.mark.parametrize("workers", [1, 16, 64])
def test_pipeline_noop_handler(benchmark: BenchmarkFixture, workers: int) -> None:
    pipeline = Pipeline(workers)
    try:
        rounds = 0

        def one_round() -> None:
            nonlocal rounds
            pipeline.run_round(ROUND)
            rounds += 1

        benchmark(one_round)

        total = ROUND * rounds
        assert pipeline.finished == total
        assert len(pipeline.offsets_seen) == total  # each record exactly once
        per_partition = total // PARTITIONS
        assert pipeline.settled_cursors() == [per_partition] * PARTITIONS
    finally:
        pipeline.close()
