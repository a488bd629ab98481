"""Where handlers run: a pool of threads, or one asyncio loop for ``async def`` handlers.

Both take work as lists (``submit(worker, works)``) and never block the caller, so the poll
thread that dispatches into them can always go back to polling. Each thread worker owns its
queue: the hash ring sends a key to one worker, so that worker sees the key's records in order.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["AsyncRunner", "ThreadWorkers"]

log = logging.getLogger(__name__)

_STOP = None


class ThreadWorkers:
    """``count`` threads, one queue each; ``submit(worker, works)`` runs ``run_batch(works)``."""

    def __init__(
        self, count: int, run_batch: Callable[[list[Any]], None], name: str = "keyshared-worker"
    ) -> None:
        self._run_batch = run_batch
        self._queued = [0] * count
        self._depth_lock = threading.Lock()
        self._queues: list[queue.SimpleQueue[list[Any] | None]] = [
            queue.SimpleQueue() for _ in range(count)
        ]
        self._threads = [
            threading.Thread(target=self._loop, args=(i, q), name=f"{name}-{i}", daemon=True)
            for i, q in enumerate(self._queues)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def count(self) -> int:
        return len(self._queues)

    def submit(self, worker: int, works: list[Any]) -> None:
        with self._depth_lock:
            self._queued[worker] += len(works)
        self._queues[worker].put(works)

    def depth(self, worker: int) -> int:
        """Records queued for ``worker`` and not yet started."""
        return self._queued[worker]

    def _loop(self, index: int, tasks: queue.SimpleQueue[list[Any] | None]) -> None:
        run_batch = self._run_batch
        while True:
            works = tasks.get()
            if works is _STOP:
                return
            with self._depth_lock:
                self._queued[index] -= len(works)
            try:
                run_batch(works)
            except BaseException:  # a worker must outlive anything a task does
                log.exception("keyshared worker task failed unexpectedly")

    def close(self, timeout: float = 5.0) -> None:
        for q in self._queues:
            q.put(_STOP)
        for thread in self._threads:
            thread.join(timeout)


class AsyncRunner:
    """One event loop thread running coroutines, at most ``concurrency`` at a time.

    Per-key order does not depend on the loop: the window releases a key's next record only
    after the previous one finished, whichever coroutine ran it.
    """

    def __init__(
        self,
        concurrency: int,
        run_one: Callable[[Any], Awaitable[None]],
        name: str = "keyshared-asyncio",
    ) -> None:
        self._run_one = run_one
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._concurrency = concurrency
        self._semaphore: asyncio.Semaphore | None = None
        self._waiting = 0  # touched only on the loop thread
        self._thread.start()
        self._ready.wait()

    @property
    def count(self) -> int:
        return self._concurrency

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._semaphore = asyncio.Semaphore(self._concurrency)
        self._loop.call_soon(self._ready.set)
        self._loop.run_forever()

    def submit(self, worker: int, works: list[Any]) -> None:
        self._loop.call_soon_threadsafe(self._spawn, works)

    def depth(self, worker: int) -> int:
        """Coroutines waiting for a concurrency slot (all reported on worker 0)."""
        return self._waiting if worker == 0 else 0

    def _spawn(self, works: list[Any]) -> None:
        self._waiting += len(works)
        for work in works:
            self._loop.create_task(self._bounded(work))

    async def _bounded(self, work: Any) -> None:
        assert self._semaphore is not None
        async with self._semaphore:
            self._waiting -= 1
            try:
                await self._run_one(work)
            except BaseException:
                log.exception("keyshared async task failed unexpectedly")

    def close(self, timeout: float = 5.0) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
