"""AsyncRunner and LoopSettlement: one wake-up per batch, a concurrency bound, long-lived
workers that park and return on close, settling per burst without ever blocking the loop.

No broker: the runner runs a fake ``run_one`` and the settlement a recording ``finish_many``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from keyshared.core.window import Entry
from keyshared.metrics import ConsumerMetrics
from keyshared.runtime.partition import PartitionState
from keyshared.runtime.settlement import LoopSettlement
from keyshared.runtime.workers import AsyncRunner


class Probe:
    """A ``run_one`` that records what ran and how many ran at once; blocks while ``gate``
    is closed."""

    def __init__(self) -> None:
        self.ran: list[Any] = []
        self.running = 0
        self.most = 0
        self.gate: asyncio.Event | None = None
        self.done = threading.Event()
        self.expected = 0

    async def __call__(self, work: Any) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        if self.gate is None:
            self.gate = asyncio.Event()
        await self.gate.wait()
        self.running -= 1
        self.ran.append(work)
        if len(self.ran) == self.expected:
            self.done.set()


def _wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def test_runs_every_record_and_never_more_than_concurrency_at_once() -> None:
    probe = Probe()
    probe.expected = 50
    runner = AsyncRunner(4, probe)
    try:
        for start in range(0, 50, 10):  # from a foreign thread, as the poll thread does
            runner.submit(start % 3, list(range(start, start + 10)))
        _wait_for(lambda: probe.running == 4)
        assert runner.depth(0) == 46 and runner.depth(1) == 0
        assert probe.gate is not None
        runner._loop.call_soon_threadsafe(probe.gate.set)
        assert probe.done.wait(5)
        assert sorted(probe.ran) == list(range(50))
        assert probe.most == 4
        assert runner.depth(0) == 0
    finally:
        runner.close()


def test_submits_of_one_batch_wake_the_loop_once_and_submits_on_the_loop_need_no_wake_up() -> None:
    probe = Probe()
    probe.expected = 6
    runner = AsyncRunner(10, probe)
    wakes: list[str] = []
    loop = runner._loop
    threadsafe, soon = loop.call_soon_threadsafe, loop.call_soon

    def counting_threadsafe(callback: Any, *args: Any) -> Any:
        wakes.append("threadsafe")
        return threadsafe(callback, *args)

    def counting_soon(callback: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(callback, "__name__", "") == "_take_inbox":
            wakes.append("soon")
        return soon(callback, *args, **kwargs)

    try:
        hold = threading.Event()
        threadsafe(hold.wait)  # keep the loop busy while the batch is submitted
        loop.call_soon_threadsafe = counting_threadsafe  # type: ignore[method-assign]
        loop.call_soon = counting_soon  # type: ignore[method-assign]
        runner.submit(0, [0, 1])
        runner.submit(1, [2])
        runner.submit(2, [3])
        hold.set()
        _wait_for(lambda: probe.running == 4)
        assert wakes == ["threadsafe"], "one wake-up for the whole batch"
        done = threading.Event()

        def on_loop() -> None:  # a success releasing its key's next record, on the loop
            runner.submit(3, [4, 5])
            done.set()

        threadsafe(on_loop)
        assert done.wait(5)
        _wait_for(lambda: probe.running == 6)
        assert wakes == ["threadsafe", "soon"]
        assert probe.gate is not None
        threadsafe(probe.gate.set)
        assert probe.done.wait(5)
        assert sorted(probe.ran) == list(range(6))
    finally:
        runner.close()


def test_records_run_on_long_lived_workers_that_park_when_idle_and_return_on_close() -> None:
    """At most ``concurrency`` tasks ever exist, whatever the number of records: a task per
    record was a third of the loop's time. close() lets parked workers return (a pending
    task left behind is reported by asyncio when it is destroyed)."""
    tasks: set[Any] = set()
    ran: list[int] = []
    done = threading.Event()

    async def run_one(work: int) -> None:
        tasks.add(asyncio.current_task())
        await asyncio.sleep(0)
        ran.append(work)
        if len(ran) in (50, 60):
            done.set()

    runner = AsyncRunner(4, run_one)
    try:
        runner.submit(0, list(range(50)))
        assert done.wait(5)
        _wait_for(lambda: len(runner._idle) == 4)  # all four parked, none ended
        done.clear()
        runner.submit(1, list(range(50, 60)))  # wakes the parked workers
        assert done.wait(5)
        assert sorted(ran) == list(range(60))
        assert len(tasks) == 4
        workers = set(runner._workers)
        assert workers == tasks
        _wait_for(lambda: len(runner._idle) == 4)
    finally:
        runner.close()
    assert all(task.done() and not task.cancelled() for task in workers)


def test_a_handler_that_never_suspends_lets_the_loop_run_its_callbacks_meanwhile() -> None:
    """One worker with a backlog of records that complete without suspending still yields
    to the loop every few hundred records: a wake-up from the poll thread or the settlement
    of successes is not held back until the whole backlog has run."""
    events: list[Any] = []
    done = threading.Event()

    async def run_one(work: int) -> None:
        events.append(work)
        if work == 0:
            asyncio.get_running_loop().call_soon(events.append, "callback")
        if work == 999:
            done.set()

    runner = AsyncRunner(1, run_one)
    try:
        runner.submit(0, list(range(1000)))
        assert done.wait(5)
    finally:
        runner.close()
    assert [e for e in events if e != "callback"] == list(range(1000)), "in submission order"
    assert events.index("callback") < 300


def test_a_handler_cancelling_its_own_task_does_not_leak_into_the_next_record() -> None:
    """Records share a worker task, so a cancel request a handler made on it (and swallowed)
    is forgotten before the next record: asyncio.timeout and TaskGroup count on it."""
    seen: list[int] = []

    async def run_one(work: int) -> None:
        task = asyncio.current_task()
        assert task is not None
        if work == 0:  # cancels itself and swallows it
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)
        elif work == 1:  # cancels itself and returns before the cancel is delivered
            task.cancel()
        else:
            seen.append(task.cancelling())
            try:
                async with asyncio.timeout(0.001):
                    await asyncio.sleep(1)
            except TimeoutError:
                seen.append(-1)

    runner = AsyncRunner(1, run_one)
    try:
        runner.submit(0, [0, 1, 2])
        _wait_for(lambda: len(seen) == 2)
    finally:
        runner.close()
    assert seen == [0, -1]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def __call__(self, works: Sequence[tuple[Any, ...]], **_: Any) -> bool:
        self.calls.append([work[1].offset for work in works])
        return True


class _Msg:
    def key(self) -> bytes:
        return b"k"

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)


def test_loop_settlement_settles_a_burst_with_one_finish_and_counts_each_success() -> None:
    metrics = ConsumerMetrics(f"g-{uuid.uuid4().hex[:8]}", "m")
    state = PartitionState("t", 0, metrics.partition("t", 0))
    finish = Recorder()
    settlement = LoopSettlement(finish)

    async def burst() -> None:
        async def one(offset: int) -> None:
            await asyncio.sleep(0)
            settlement.add(state, Entry(offset, b"k", 0, _Msg(), 0.0, True), 0.001)

        await asyncio.gather(*(one(offset) for offset in range(5)))
        await asyncio.sleep(0)  # the flush scheduled by the first success runs
        assert finish.calls == [[0, 1, 2, 3, 4]]
        settlement.add(state, Entry(5, b"k", 0, _Msg(), 0.0, True), 0.001)
        await asyncio.sleep(0)

    asyncio.run(burst())
    assert finish.calls == [[0, 1, 2, 3, 4], [5]]
    assert state.metrics.processed._value.get() == 6


class BusyLock(Recorder):
    """A ``finish_many`` whose lock is busy (refuses ``wait=False``) for ``refusals`` tries."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals
        self.tries: list[bool] = []  # the ``wait`` of every try

    def __call__(self, works: Sequence[tuple[Any, ...]], **kwargs: Any) -> bool:
        wait = kwargs["wait"]
        self.tries.append(wait)
        if not wait and self.refusals > 0:
            self.refusals -= 1
            return False
        return super().__call__(works)


def test_a_busy_lock_never_blocks_the_loop_and_the_successes_are_settled_in_order_later() -> None:
    """The poll thread holding the lock (admitting a batch) must not stop the loop: the flush
    retries shortly, keeps later successes behind the refused ones and counts each success
    once, when it is first tried."""
    metrics = ConsumerMetrics(f"g-{uuid.uuid4().hex[:8]}", "m")
    state = PartitionState("t", 0, metrics.partition("t", 0))
    finish = BusyLock(refusals=2)
    settlement = LoopSettlement(finish)

    async def main() -> None:
        for offset in range(3):
            settlement.add(state, Entry(offset, b"k", 0, _Msg(), 0.0, True), 0.001)
        await asyncio.sleep(0)
        assert finish.tries == [False] and finish.calls == []
        assert state.metrics.processed._value.get() == 3, "counted at the first try"
        settlement.add(state, Entry(3, b"k", 0, _Msg(), 0.0, True), 0.001)
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert finish.tries == [False, False, False]
    assert finish.calls == [[0, 1, 2, 3]]
    assert state.metrics.processed._value.get() == 4


def test_a_lock_busy_for_too_long_is_waited_for_after_all() -> None:
    metrics = ConsumerMetrics(f"g-{uuid.uuid4().hex[:8]}", "m")
    state = PartitionState("t", 0, metrics.partition("t", 0))
    finish = BusyLock(refusals=10**6)
    settlement = LoopSettlement(finish)

    async def main() -> None:
        settlement.add(state, Entry(0, b"k", 0, _Msg(), 0.0, True), 0.001)
        deadline = asyncio.get_running_loop().time() + 2
        while not finish.calls:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.001)

    asyncio.run(main())
    assert finish.calls == [[0]]
    assert finish.tries[-1] is True and not any(finish.tries[:-1])
    assert 3 <= len(finish.tries) <= 60  # retried every half millisecond for 20 ms, not spun
