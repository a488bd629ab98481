"""Where handlers run: a pool of threads, or one asyncio loop for ``async def`` handlers.

Both take work as lists (``submit(worker, works)``) and never block the caller, so the poll
thread that dispatches into them can always go back to polling.

Thread workers each have a queue, filled as the hash ring says, so a key's records usually run
on the same thread. But an idle worker *steals* from the longest queue: a record queued behind a
slow or stuck handler is taken by a free thread instead of waiting. Per-key order does not
depend on which thread runs a record, because the window releases a key's next record only
after the previous one finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from keyshared.runtime.execution import RecordExecutor

__all__ = ["AsyncRunner", "ThreadWorkers"]

log = logging.getLogger(__name__)


class ThreadWorkers:
    """``count`` threads; ``submit(worker, works)`` queues for ``worker``; a thread out of work
    steals from busy ones, and sleeping threads are woken for that when a record has run
    longer than ``steal_after`` seconds.

    Each worker's records sit in a deque that its own thread and stealers pop from (deque pops
    are atomic), so taking a record needs no lock; a per-worker doorbell wakes a sleeping
    thread once per submit, not once per record. Stealing only from a worker that is stuck
    keeps the common case cheap while bounding how long a record can wait behind someone else's
    slow handler: about ``steal_after`` plus the interval of :meth:`nudge`.

    :param count: number of threads.
    :param run_one: runs one unit of work; must not raise (a raise is logged and survived).
    :param steal_after: seconds a record must have run before its thread's queue is stolen.
    :param on_idle: called on a thread that ran out of work, before it sleeps.
    """

    def __init__(
        self,
        count: int,
        run_one: Callable[[Any], None] = lambda work: None,
        name: str = "keyshared-worker",
        steal_after: float = 0.005,
        on_idle: Callable[[], None] = lambda: None,
    ) -> None:
        self._run_one = run_one
        self._on_idle = on_idle
        self._steal_after = steal_after
        self._queues: list[deque[Any]] = [deque() for _ in range(count)]
        self._doorbells: list[queue.SimpleQueue[bool]] = [queue.SimpleQueue() for _ in range(count)]
        self._busy_since = [0.0] * count  # monotonic start of the running record; 0: none
        self._sleeping = [False] * count  # hints only: a stale value costs one spare wake-up
        self._closed = False
        self._threads = [
            threading.Thread(target=self._loop, args=(i,), name=f"{name}-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def count(self) -> int:
        return len(self._queues)

    def bind(self, executor: RecordExecutor) -> None:
        """Run records with ``executor``; a thread out of work settles its held successes."""
        self._run_one = executor.run
        self._on_idle = executor.settlements.flush_mine

    def on_draining(self, states: list[Any]) -> None:
        """Nothing to do: queued records of a draining partition are abandoned when taken."""

    def submit(self, worker: int, works: list[Any]) -> None:
        self._queues[worker].extend(works)
        self._doorbells[worker].put(True)
        if self._stuck(worker, time.monotonic()):
            self._wake_a_sleeper()

    def nudge(self) -> None:
        """Wake sleeping threads to take over queues stuck behind a slow record.

        Called periodically (the poll loop does, several times a second): a record queued
        before its thread got stuck is rescued here, since no submit will come to notice it.
        """
        now = time.monotonic()
        waiting = sum(len(q) for w, q in enumerate(self._queues) if q and self._stuck(w, now))
        while waiting > 0 and self._wake_a_sleeper():
            waiting -= 1

    def _wake_a_sleeper(self) -> bool:
        for index, sleeping in enumerate(self._sleeping):
            if sleeping:
                self._sleeping[index] = False
                self._doorbells[index].put(True)
                return True
        return False

    def _stuck(self, worker: int, now: float) -> bool:
        since = self._busy_since[worker]
        return since > 0.0 and now - since > self._steal_after

    def depth(self, worker: int) -> int:
        """Records queued for ``worker`` and not yet started."""
        return len(self._queues[worker])

    def _steal(self) -> Any | None:
        """The oldest record of the longest queue whose thread is busy, if any.

        A thread that ran out of its own work takes a record that would otherwise wait behind
        a running one: this evens out the ring's imbalance and rescues records queued behind a
        slow handler. Only sleeping threads need waking for that (submit and nudge do it when
        a record has run longer than ``steal_after``).
        """
        busy = self._busy_since
        victims = [q for w, q in enumerate(self._queues) if q and busy[w] > 0.0]
        while victims:
            victim = max(victims, key=len)
            try:
                return victim.popleft()
            except IndexError:  # its owner or another stealer took it meanwhile
                victims.remove(victim)
        return None

    def _loop(self, index: int) -> None:
        own = self._queues[index]
        doorbell = self._doorbells[index]
        busy = self._busy_since
        clock = time.monotonic
        while True:
            self._sleeping[index] = True
            doorbell.get()
            self._sleeping[index] = False
            if self._closed:
                return
            run_one = self._run_one  # bound before the first record is submitted
            while True:
                try:
                    work = own.popleft()
                except IndexError:
                    work = self._steal()
                    if work is None:
                        self._on_idle()
                        break
                busy[index] = clock()
                try:
                    run_one(work)
                except BaseException:  # a worker must outlive anything a task does
                    log.exception("keyshared worker task failed unexpectedly")
                finally:
                    busy[index] = 0.0

    def close(self, timeout: float = 5.0) -> None:
        self._closed = True
        for doorbell in self._doorbells:
            doorbell.put(False)
        for thread in self._threads:
            thread.join(timeout)


class AsyncRunner:
    """One event loop thread running coroutines, at most ``concurrency`` at a time.

    Per-key order does not depend on the loop: the window releases a key's next record only
    after the previous one finished, whichever coroutine ran it.

    Lean on purpose, because at a thousand coroutines the loop's own bookkeeping is the cost:
    ``submit`` only appends to an inbox and wakes the loop once per batch (not once per list,
    let alone per record), a submit made on the loop itself (a success releasing its key's next
    record) needs no wake-up at all, and records beyond ``concurrency`` wait in a plain deque
    instead of as tasks parked on a semaphore.

    Records run on up to ``concurrency`` long-lived worker coroutines, each taking the next
    waiting record as soon as its previous one ends. A task per record cost a Task object, a
    first ``call_soon`` step and set bookkeeping (``current_task``, add and discard): about a
    third of the loop's time per record with a handler that only sleeps. One consequence: a
    worker is one task, so a context variable a handler sets stays set for the next record
    that worker runs, unless the handler resets it (``var.reset(token)``).
    """

    def __init__(
        self,
        concurrency: int,
        run_one: Callable[[Any], Awaitable[None]] | None = None,
        name: str = "keyshared-asyncio",
    ) -> None:
        self._run_one = run_one
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._concurrency = concurrency
        self._inbox: deque[Any] = deque()  # submitted, not yet seen by the loop (any thread)
        self._wake_scheduled = False  # a _take_inbox is on its way: no need to wake the loop
        self._waiting: deque[Any] = deque()  # taken, waiting for a free worker (loop thread)
        # Workers with nothing to do, each parked on a future that a record will be set into
        # (loop thread only). Popped last-in first-out: the busiest workers stay warm.
        self._idle: list[asyncio.Future[Any]] = []
        self._workers: set[asyncio.Task[None]] = set()  # strong references (loop thread)
        self._thread.start()
        self._ready.wait()

    @property
    def count(self) -> int:
        return self._concurrency

    def bind(self, executor: RecordExecutor) -> None:
        self._run_one = executor.run_async

    def on_draining(self, states: list[Any]) -> None:
        """Nothing to do: a worker taking a record of a draining partition abandons it."""

    def nudge(self) -> None:
        """Nothing to do: one event loop has no queue to steal from."""

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        self._loop.run_forever()

    def submit(self, worker: int, works: list[Any]) -> None:
        self._inbox.extend(works)
        if self._wake_scheduled:
            return  # the scheduled _take_inbox has not cleared the flag yet: it will see these
        self._wake_scheduled = True
        if threading.get_ident() == self._thread.ident:
            self._loop.call_soon(self._take_inbox)
        else:
            self._loop.call_soon_threadsafe(self._take_inbox)

    def depth(self, worker: int) -> int:
        """Records waiting for a free worker (all reported on worker 0)."""
        return len(self._waiting) + len(self._inbox) if worker == 0 else 0

    def _take_inbox(self) -> None:
        # Cleared before taking, so a submit racing with this either lands before the pops
        # below or schedules another _take_inbox: nothing is left behind unseen.
        self._wake_scheduled = False
        inbox, waiting = self._inbox, self._waiting
        while inbox:
            waiting.append(inbox.popleft())
        self._fill()

    def _fill(self) -> None:
        """Hand waiting records to idle workers, then start workers up to the bound."""
        waiting, idle = self._waiting, self._idle
        while waiting and idle:
            parked = idle.pop()
            if not parked.done():  # done only if its worker was cancelled meanwhile
                parked.set_result(waiting.popleft())
        workers = self._workers
        while waiting and len(workers) < self._concurrency:
            task = self._loop.create_task(self._work(waiting.popleft()))
            # asyncio keeps only weak references to tasks: without this set a parked worker
            # could be garbage-collected and the record set into its future never run.
            workers.add(task)
            task.add_done_callback(workers.discard)

    async def _work(self, work: Any) -> None:
        """Run ``work``, then the next waiting record, and so on; park when none is waiting.

        Every ``_YIELD_EVERY`` records the worker yields once, so a handler that never
        suspends cannot keep the loop from its other callbacks (a wake-up from the poll
        thread, the settlement of successes) for a whole backlog.
        """
        assert self._run_one is not None, "bind() an executor before submitting"
        run_one = self._run_one
        waiting, idle = self._waiting, self._idle
        create_future = self._loop.create_future
        task = asyncio.current_task()
        assert task is not None
        ran = 0
        while True:
            try:
                await run_one(work)
            except BaseException:
                log.exception("keyshared async task failed unexpectedly")
            if task.cancelling():
                await _forget_cancel(task)
            ran += 1
            if not ran % _YIELD_EVERY:
                await asyncio.sleep(0)
            if waiting:
                work = waiting.popleft()
                continue
            parked: asyncio.Future[Any] = create_future()
            idle.append(parked)
            work = await parked
            if work is _STOP:
                return

    def close(self, timeout: float = 5.0) -> None:
        self._loop.call_soon_threadsafe(self._stop)
        self._thread.join(timeout)

    def _stop(self) -> None:
        """Let parked workers return, then stop the loop.

        A parked worker would otherwise stay pending for good and asyncio would report it as
        a task destroyed while pending. A worker still in a handler (a drain that timed out)
        is left where it is, as before: cancelling it would run the failure path after the
        consumer has stopped.
        """
        idle, self._idle = self._idle, []
        for parked in idle:
            if not parked.done():
                parked.set_result(_STOP)
        self._loop.call_soon(self._loop.stop)  # after the wake-ups just scheduled


async def _forget_cancel(task: asyncio.Task[None]) -> None:
    """A handler cancelled its own task, a worker's (its record has its outcome already):
    take the cancellation here, or it would end the next record this worker runs, and an
    asyncio.timeout or TaskGroup there would take the request count for its own."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(0)  # a cancel not delivered yet (no await since) lands here
    while task.uncancel():
        pass


_STOP = object()  # set into a parked worker's future: return instead of running a record
_YIELD_EVERY = 256  # records a worker runs in a row before letting the loop run its callbacks
