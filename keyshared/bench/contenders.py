"""The contenders a scenario races on one topic: keyshared and the baselines it must beat.

Every contender reads the same topic from the beginning with its own fresh group and stops after
``records`` records. Each is timed the same way, by a :class:`Tally`: from the first handler
start to the ``records``-th handler finish, so the group join and start-up are excluded alike
(the whole-run figure), with a mark every few completions for the steady-state figure.

- :func:`run_keyshared`: a :class:`~keyshared.KeySharedConsumer` with ``workers`` threads.
- :func:`run_keyshared_batches`: the same with a batch handler (``batch_size``).
- :func:`run_serial`: a plain confluent-kafka consumer handling records one by one, which is
  what a consumer group member does per partition.
- :func:`run_thread_pool`: consume batches and throw every record at a thread pool: fast, but
  no per-key order and no safe commits. The naive answer keyshared is measured against.
- :func:`run_raw`: a bare ``consume(1000)`` loop that only touches each record: the ceiling.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer

from keyshared.bench.result import Measurement, timed
from keyshared.bench.steady import mark_every
from keyshared.record import Record

__all__ = [
    "BenchError",
    "Tally",
    "run_keyshared",
    "run_keyshared_batches",
    "run_raw",
    "run_serial",
    "run_thread_pool",
]

Work = Callable[[], None]


class BenchError(RuntimeError):
    """A contender did not finish its records in time (the message says how far it got)."""


class Tally:
    """Thread-safe count of finished records, with the first start, the last finish and the
    completion marks the steady-state figure is computed from (:mod:`keyshared.bench.steady`):
    one clock read every ``every`` completions, under the lock the count already takes."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.every = mark_every(target)
        self._marks: list[float] = []
        self._next_mark = self.every
        self._max_marks = target // self.every
        self.first: float | None = None
        self.last: float | None = None
        # Records finished by ``last``: the figure's numerator. Handlers still running when
        # the target was reached finish later and must not count (a batch handler's last
        # calls would otherwise add hundreds of records to a window that had ended).
        self.timed = 0
        self.done = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Note a handler start; the earliest one is the start of the timed window.

        The lock is taken only while no start is known, and the earliest instant wins: a
        thread preempted between the check and the assignment would otherwise set a *later*
        start than threads that ran meanwhile, inflating the rate of a short run.
        """
        if self.first is None:
            now = time.monotonic()
            with self._lock:
                if self.first is None or now < self.first:
                    self.first = now

    def finish(self, records: int = 1) -> None:
        with self._lock:
            self.count += records
            if self.count >= self._next_mark and len(self._marks) < self._max_marks:
                now = time.monotonic()
                while self.count >= self._next_mark and len(self._marks) < self._max_marks:
                    self._marks.append(now)  # a batch can pass several marks at once
                    self._next_mark += self.every
            if self.count >= self.target and not self.done.is_set():
                self.last = time.monotonic()
                self.timed = self.count
                self.done.set()

    def wait(self, label: str, timeout: float) -> None:
        if not self.done.wait(timeout):
            raise BenchError(
                f"{label}: only {self.count} of {self.target} records within {timeout:.0f} s"
            )

    def marks(self) -> list[float]:
        """The completion marks so far, in seconds since the first handler start."""
        first = self.first or 0.0
        with self._lock:
            return [mark - first for mark in self._marks]

    def measurement(self, label: str, **extra: Any) -> Measurement:
        assert self.first is not None and self.last is not None
        seconds = self.last - self.first
        return timed(label, self.timed, seconds, self.marks(), self.every, **extra)


def _config(bootstrap: str, group: str, **more: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        **more,
    }


def _sleeper(seconds: float) -> Work:
    if seconds <= 0:
        return lambda: None
    return lambda: time.sleep(seconds)


def run_keyshared(
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    handler_s: float,
    workers: int,
    *,
    label: str | None = None,
    timeout: float = 600.0,
    on_record: Callable[[Record], None] | None = None,
    config: dict[str, Any] | None = None,
    **options: Any,
) -> Measurement:
    """Time a KeySharedConsumer over ``records`` records of ``topic`` (``config``: more
    confluent-kafka settings; ``options``: keyshared's)."""
    from keyshared.consumer.key_shared_consumer import KeySharedConsumer

    tally = Tally(records)
    work = _sleeper(handler_s)

    def handle(record: Record) -> None:
        tally.start()
        if on_record is not None:
            on_record(record)
        work()
        tally.finish()

    consumer = KeySharedConsumer(
        {**_config(bootstrap, group), **(config or {})}, [topic], handle, workers=workers, **options
    )
    thread = threading.Thread(target=consumer.run, name="bench-keyshared", daemon=True)
    thread.start()
    name = label or f"keyshared ({workers} workers)"
    try:
        tally.wait(name, timeout)
    finally:
        consumer.stop()
        thread.join(60)
    return tally.measurement(name, workers=workers)


def run_keyshared_batches(
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    workers: int,
    batch_size: int,
    handle: Callable[[list[Record]], None] = lambda batch: None,
    *,
    label: str | None = None,
    timeout: float = 600.0,
    **options: Any,
) -> Measurement:
    """Time a KeySharedConsumer with a batch handler (``batch_size``) over ``records`` records;
    each call counts its batch's records. ``extra`` says how many calls there were."""
    from keyshared.consumer.key_shared_consumer import KeySharedConsumer

    tally = Tally(records)
    calls = [0]

    def handle_batch(batch: list[Record]) -> None:
        tally.start()
        handle(batch)
        calls[0] += 1  # an estimate under threads (no lock): only reported, never asserted
        tally.finish(len(batch))

    consumer = KeySharedConsumer(
        _config(bootstrap, group),
        [topic],
        handle_batch,
        workers=workers,
        batch_size=batch_size,
        **options,
    )
    thread = threading.Thread(target=consumer.run, name="bench-keyshared-batch", daemon=True)
    thread.start()
    name = label or f"keyshared batches of <= {batch_size} ({workers} workers)"
    try:
        tally.wait(name, timeout)
    finally:
        consumer.stop()
        thread.join(60)
    return tally.measurement(
        name,
        workers=workers,
        batch_size=batch_size,
        mean_batch=round(records / max(calls[0], 1), 1),
    )


def _consume_loop(
    bootstrap: str, group: str, topic: str, tally: Tally, each_batch: Callable[[list[Any]], None]
) -> None:
    consumer = Consumer(_config(bootstrap, group, **{"enable.auto.commit": True}))
    consumer.subscribe([topic])
    try:
        while not tally.done.is_set():
            batch = [m for m in consumer.consume(1000, 0.2) if m.error() is None]
            if batch:
                each_batch(batch)
    finally:
        consumer.close()


def run_serial(
    bootstrap: str, topic: str, group: str, records: int, handler_s: float, timeout: float = 600.0
) -> Measurement:
    """Time a plain consumer that handles each record before the next (per-partition order)."""
    tally = Tally(records)
    work = _sleeper(handler_s)

    def each_batch(batch: list[Any]) -> None:
        for message in batch:
            if tally.done.is_set():
                return
            tally.start()
            message.value()
            work()
            tally.finish()

    _run_loop(bootstrap, group, topic, tally, each_batch, "serial consumer", timeout)
    return tally.measurement("plain serial consumer")


def run_thread_pool(
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    handler_s: float,
    threads: int,
    timeout: float = 600.0,
) -> Measurement:
    """Time a consumer that submits every record to a thread pool (no order, no safe commit)."""
    tally = Tally(records)
    work = _sleeper(handler_s)
    slots = threading.Semaphore(threads * 4)  # bounded, or the loop would buffer the topic
    pool = ThreadPoolExecutor(threads, thread_name_prefix="bench-pool")

    def task() -> None:
        try:
            tally.start()
            work()
            tally.finish()
        finally:
            slots.release()

    def each_batch(batch: list[Any]) -> None:
        for _message in batch:
            slots.acquire()
            pool.submit(task)

    try:
        _run_loop(bootstrap, group, topic, tally, each_batch, "thread pool", timeout)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return tally.measurement(f"naive thread pool ({threads} threads, unordered)", threads=threads)


def run_raw(
    bootstrap: str, topic: str, group: str, records: int, timeout: float = 600.0
) -> Measurement:
    """Time a bare ``consume(1000)`` loop that reads each record's value and does nothing."""
    tally = Tally(records)

    def each_batch(batch: list[Any]) -> None:
        tally.start()
        for message in batch:
            message.value()
        tally.finish(len(batch))

    _run_loop(bootstrap, group, topic, tally, each_batch, "raw consume loop", timeout)
    return tally.measurement("raw confluent-kafka consume(1000) loop")


def _run_loop(
    bootstrap: str,
    group: str,
    topic: str,
    tally: Tally,
    each_batch: Callable[[list[Any]], None],
    label: str,
    timeout: float,
) -> None:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            _consume_loop(bootstrap, group, topic, tally, each_batch)
        except BaseException as exc:
            errors.append(exc)
            tally.done.set()

    thread = threading.Thread(target=target, name=f"bench-{label}", daemon=True)
    thread.start()
    try:
        tally.wait(label, timeout)
    finally:
        tally.done.set()
        thread.join(30)
    if errors:
        raise BenchError(f"{label} failed: {errors[0]}") from errors[0]
