"""Run a ``KeySharedConsumer`` on a thread of the test, and record what its handler does.

``Recorder`` journals start and end events in memory, in the same shape as the subprocess
journal, so ``journal.check`` proves order and completeness for in-process consumers too.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import keyshared
from tests.kafka.support.journal import Event


def run_on_thread(
    consumer: keyshared.KeySharedConsumer, name: str = "test-consumer"
) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``consumer.run()`` on a daemon thread; what it raises lands in the list, for the
    test to assert on (an exception on a thread would otherwise only be printed)."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            consumer.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread, errors


@contextmanager
def running(consumer: keyshared.KeySharedConsumer, stop_timeout: float = 60.0) -> Iterator[None]:
    """Run ``consumer`` on a thread; stop it (drain, commit) and join on the way out."""
    thread, errors = run_on_thread(consumer)
    try:
        deadline = time.monotonic() + 30
        while not consumer.wait_started(0.1):
            assert not errors, f"run() failed: {errors[0]!r}"
            assert time.monotonic() < deadline, "the consumer did not start"
        yield
    finally:
        consumer.stop()
        thread.join(stop_timeout)
    assert not thread.is_alive(), "the consumer did not stop"
    assert not errors, f"run() failed: {errors[0]!r}"


class Running:
    """``consumer.run()`` on a thread of the test; :meth:`stop` drains, commits and re-raises."""

    def __init__(self, consumer: keyshared.KeySharedConsumer, wait: float = 60.0) -> None:
        self.consumer = consumer
        self.error: BaseException | None = None
        self._wait = wait
        self._thread = threading.Thread(target=self._run, name="test-consumer", daemon=True)
        self._thread.start()
        assert consumer.wait_started(wait), "the consumer did not start"

    def _run(self) -> None:
        try:
            self.consumer.run()
        except BaseException as exc:
            self.error = exc

    def join(self) -> None:
        self._thread.join(self._wait)

    def stop(self) -> None:
        self.consumer.stop()
        self.join()
        assert not self._thread.is_alive(), "the consumer did not stop"
        if self.error is not None:
            raise self.error


StartConsumer = Callable[..., Running]
FAST_RETRY = keyshared.RetryPolicy(max_attempts=2, initial_backoff=0.05, jitter=0.0)


def consumers_for(
    bootstrap: str, wait: float = 60.0, retry: keyshared.RetryPolicy = FAST_RETRY
) -> Iterator[StartConsumer]:
    """Body of a ``start`` fixture: ``start(group, topic, handler, member="", **options)``.

    Consumers get fast commits and retries unless the test says otherwise; every consumer
    started is stopped (drain, commit) when the test ends.
    """
    started: list[Running] = []

    def start(
        group: str, topic: str, handler: Callable[..., object], member: str = "", **options: Any
    ) -> Running:
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": member or f"m-{uuid.uuid4().hex[:8]}",
        }
        options = {"workers": 4, "commit_interval": 0.1, "retry": retry, **options}
        run = Running(keyshared.KeySharedConsumer(config, [topic], handler, **options), wait)
        started.append(run)
        return run

    yield start
    for run in started:
        run.consumer.stop()
    for run in started:
        run.join()


class Recorder:
    """A handler that journals ``S``/``E`` events; the value is the per-key sequence number."""

    def __init__(
        self, work: Callable[[keyshared.Record], None] | None = None, pid: int | None = None
    ) -> None:
        self.pid = os.getpid() if pid is None else pid  # members in one process: one id each
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._work = work
        self._running = 0
        self.max_concurrency = 0

    def _log(self, kind: str, record: keyshared.Record) -> None:
        event = Event(
            kind,
            record.raw_key,
            int(record.value),
            self.pid,
            record.partition,
            record.offset,
            time.monotonic_ns(),
            record.attempt,
        )
        with self._lock:
            self.events.append(event)
            self._running += 1 if kind == "S" else -1
            self.max_concurrency = max(self.max_concurrency, self._running)

    def __call__(self, record: keyshared.Record) -> None:
        self._log("S", record)
        try:
            if self._work is not None:
                self._work(record)
        finally:
            self._log("E", record)

    def finished(self) -> int:
        with self._lock:
            return len({(e.key, e.seq) for e in self.events if e.kind == "E"})

    def snapshot(self) -> list[Event]:
        with self._lock:
            return list(self.events)


class AsyncRecorder(Recorder):
    """The same journal for an ``async def`` handler; ``delay(record)`` is awaited inside."""

    def __init__(self, delay: Callable[[keyshared.Record], float]) -> None:
        super().__init__()
        self._delay = delay

    async def __call__(self, record: keyshared.Record) -> None:  # type: ignore[override]
        self._log("S", record)
        try:
            await asyncio.sleep(self._delay(record))
        finally:
            self._log("E", record)
