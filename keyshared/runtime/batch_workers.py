"""The worker pools of batch handlers: take up to ``size`` queued records at once.

Why the batch is assembled where records are taken, not where they are submitted: records
reach a worker a few at a time (a poll's share, the next records a settled batch released),
and a list cut at submit time could never grow again. A worker instead takes whatever has
queued for it, up to ``size``: under load records queue while its previous batch runs, so
batches fill by themselves, and with ``linger`` it waits that long for a short batch to fill.

Both pools keep everything else of their single-record parents (:mod:`keyshared.runtime.workers`):
a queue per thread and stealing from stuck threads (a thief takes a whole batch), or one event
loop with ``concurrency`` worker coroutines. Only the loops that take records differ, so the
single-record hot path is untouched.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from keyshared.runtime.batches import BatchExecutor, BatchHandler
from keyshared.runtime.workers import (
    _STOP,
    _YIELD_EVERY,
    AsyncRunner,
    ThreadWorkers,
    _forget_cancel,
)

if TYPE_CHECKING:
    from keyshared.runtime.execution import RecordExecutor

__all__ = ["BatchAsyncRunner", "BatchThreadWorkers", "take"]

log = logging.getLogger(__name__)


def take(source: deque[Any], size: int, into: list[Any] | None = None) -> list[Any]:
    """Pop up to ``size`` items (``into`` included) from the left of ``source``.

    Pops are atomic, so the owner and thieves may take from one deque without a lock.
    """
    batch = [] if into is None else into
    try:
        while len(batch) < size:
            batch.append(source.popleft())
    except IndexError:
        pass
    return batch


class BatchThreadWorkers(ThreadWorkers):
    """``count`` threads, each calling the batch handler with up to ``size`` records.

    :param handler: the batch handler (a plain function).
    :param size: the most records one call receives.
    :param linger: seconds a thread with fewer than ``size`` records waits for more.
    """

    def __init__(
        self,
        count: int,
        handler: BatchHandler,
        size: int,
        linger: float = 0.0,
        name: str = "keyshared-worker",
    ) -> None:
        # Set before the threads start: they read these as soon as they are woken.
        self._handler = handler
        self._size = size
        self._linger = linger
        self._batches: BatchExecutor | None = None
        super().__init__(count, name=name)

    def bind(self, executor: RecordExecutor) -> None:
        self._batches = BatchExecutor(executor, self._handler)

    def _loop(self, index: int) -> None:
        own = self._queues[index]
        doorbell = self._doorbells[index]
        busy = self._busy_since
        size, linger = self._size, self._linger
        clock = time.monotonic
        while not self._closed:  # a linger may have taken close's wake-up: check first
            self._sleeping[index] = True
            doorbell.get()
            self._sleeping[index] = False
            if self._closed:
                return
            assert self._batches is not None, "bind() an executor before submitting"
            run = self._batches.run
            while True:
                batch = take(own, size)
                if not batch:
                    batch = self._steal_batch(size)
                    if not batch:
                        break
                elif linger and len(batch) < size:
                    self._fill(own, doorbell, batch, size, linger)
                busy[index] = clock()
                try:
                    run(batch)
                except BaseException:  # a worker must outlive anything a task does
                    log.exception("keyshared batch worker task failed unexpectedly")
                finally:
                    busy[index] = 0.0

    def _fill(
        self,
        own: deque[Any],
        doorbell: queue.SimpleQueue[bool],
        batch: list[Any],
        size: int,
        linger: float,
    ) -> None:
        """Wait up to ``linger`` for submits to fill ``batch``; each submit rings the doorbell."""
        deadline = time.monotonic() + linger
        while len(batch) < size and not self._closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                doorbell.get(timeout=remaining)
            except queue.Empty:
                return
            take(own, size, batch)

    def _steal_batch(self, size: int) -> list[Any]:
        """Up to ``size`` of the oldest records of the longest queue whose thread is busy."""
        busy = self._busy_since
        victims = [q for w, q in enumerate(self._queues) if q and busy[w] > 0.0]
        if not victims:
            return []
        return take(max(victims, key=len), size)


class BatchAsyncRunner(AsyncRunner):
    """One event loop, ``concurrency`` worker coroutines each awaiting the batch handler with
    up to ``size`` records.

    :param handler: the batch handler (an ``async def`` function).
    :param size: the most records one call receives.
    :param linger: seconds a worker with fewer than ``size`` records waits for more.
    """

    def __init__(
        self,
        concurrency: int,
        handler: BatchHandler,
        size: int,
        linger: float = 0.0,
        name: str = "keyshared-asyncio",
    ) -> None:
        self._handler = handler
        self._size = size
        self._linger = linger
        self._batches: BatchExecutor | None = None
        # Workers waiting for their short batch to fill, each on a future (loop thread only).
        self._lingering: list[asyncio.Future[None]] = []
        super().__init__(concurrency, name=name)

    def bind(self, executor: RecordExecutor) -> None:
        self._batches = BatchExecutor(executor, self._handler)

    def _fill(self) -> None:
        """Give arrivals to lingering workers first (their batches want them), else hand a
        batch to each idle worker, then start workers up to the bound."""
        # A lingering worker whose time ran out has its future resolved already: only the
        # ones still waiting can take these records (else they would wait for the next submit).
        lingering = [wake for wake in self._lingering if not wake.done()]
        self._lingering = []
        if lingering:
            for wake in lingering:
                wake.set_result(None)
            return
        waiting, idle, size = self._waiting, self._idle, self._size
        while waiting and idle:
            parked = idle.pop()
            if not parked.done():  # done only if its worker was cancelled meanwhile
                parked.set_result(take(waiting, size))
        workers = self._workers
        while waiting and len(workers) < self._concurrency:
            task = self._loop.create_task(self._work(take(waiting, size)))
            workers.add(task)  # a strong reference: see AsyncRunner._fill
            task.add_done_callback(workers.discard)

    async def _work(self, work: Any) -> None:
        """Run batch after batch; park when nothing waits (see :meth:`AsyncRunner._work`)."""
        assert self._batches is not None, "bind() an executor before submitting"
        run = self._batches.run_async
        waiting, idle, size = self._waiting, self._idle, self._size
        create_future = self._loop.create_future
        task = asyncio.current_task()
        assert task is not None
        batch: list[Any] = work
        ran = 0
        while True:
            if self._linger and len(batch) < size:
                await self._wait_to_fill(batch)
            try:
                await run(batch)
            except BaseException:
                log.exception("keyshared async batch task failed unexpectedly")
            if task.cancelling():
                await _forget_cancel(task)
            ran += 1
            if not ran % _YIELD_EVERY:
                await asyncio.sleep(0)
            if waiting:
                batch = take(waiting, size)
                continue
            parked: asyncio.Future[Any] = create_future()
            idle.append(parked)
            batch = await parked
            if batch is _STOP:
                return

    async def _wait_to_fill(self, batch: list[Any]) -> None:
        loop = self._loop
        deadline = loop.time() + self._linger
        while len(batch) < self._size:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            wake: asyncio.Future[None] = loop.create_future()
            self._lingering.append(wake)
            timer = loop.call_later(remaining, _resolve, wake)
            try:
                await wake
            finally:
                timer.cancel()
            take(self._waiting, self._size, batch)
        if self._waiting:  # full, with more waiting: the idle workers' turn
            self._fill()

    def _stop(self) -> None:
        lingering, self._lingering = self._lingering, []
        for wake in lingering:
            _resolve(wake)
        super()._stop()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
