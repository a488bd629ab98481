"""SettlementBuffer: batched success settlement that never loses or double-counts a success.

No broker: the dispatcher's ``finish_many`` is replaced by a recorder whose lock can be made
"busy", which is the case the buffer must handle without blocking a worker.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from keyshared.core.window import Entry
from keyshared.metrics import ConsumerMetrics
from keyshared.runtime.partition import PartitionState
from keyshared.runtime.settlement import SettlementBuffer, account


class FakeFinish:
    """Records settled offsets; while ``busy`` a non-waiting call is refused, like a held lock."""

    def __init__(self) -> None:
        self.busy = False
        self.settled: list[int] = []
        self.refused = 0
        self.waited = 0

    def __call__(self, works: Sequence[tuple[Any, ...]], *, wait: bool) -> bool:
        if self.busy and not wait:
            self.refused += 1
            return False
        if wait:
            self.waited += 1
        self.settled.extend(work[1].offset for work in works)
        return True


def _state() -> PartitionState:
    metrics = ConsumerMetrics(f"g-{uuid.uuid4().hex[:8]}", "m")
    return PartitionState("t", 0, metrics.partition("t", 0))


class _Msg:
    def key(self) -> bytes:
        return b"k"

    def timestamp(self) -> tuple[int, int]:
        return (0, 0)


def _entry(offset: int) -> Entry[Any]:
    return Entry(offset, b"k", 0, _Msg(), 0.0, True)


def _processed(state: PartitionState) -> float:
    return float(state.metrics.processed._value.get())


def _busy() -> tuple[FakeFinish, SettlementBuffer, PartitionState]:
    """A buffer whose dispatcher lock is busy, and a partition to settle for."""
    finish = FakeFinish()
    finish.busy = True
    return finish, SettlementBuffer(finish), _state()


def _add(buffer: SettlementBuffer, state: PartitionState, offsets: range) -> None:
    for offset in offsets:
        buffer.add(state, _entry(offset), 0.001)


def test_a_busy_lock_defers_settlement_and_the_idle_flush_settles_everything() -> None:
    finish, buffer, state = _busy()

    _add(buffer, state, range(100))  # three attempts, at 32, 64 and 96, find the lock busy

    assert finish.settled == []
    assert finish.refused == 3
    buffer.flush_mine()  # the thread ran out of work: it waits for the lock this time
    assert finish.settled == list(range(100))
    assert _processed(state) == 100  # counted once each, though three settles were deferred


def test_deferred_successes_keep_their_order_when_the_lock_frees() -> None:
    finish, buffer, state = _busy()
    _add(buffer, state, range(40))
    finish.busy = False
    _add(buffer, state, range(40, 64))

    assert finish.settled == list(range(64))
    assert finish.waited == 0  # settled by a non-waiting attempt once the lock was free
    assert _processed(state) == 64


def test_a_thread_holding_too_many_waits_for_the_lock_after_all() -> None:
    finish, buffer, state = _busy()

    _add(buffer, state, range(4096))

    assert finish.settled == list(range(4096))
    assert finish.waited == 1


def test_stale_successes_of_a_busy_thread_are_settled_by_another_thread() -> None:
    finish = FakeFinish()
    buffer = SettlementBuffer(finish)
    state = _state()
    added = threading.Event()

    def worker() -> None:
        buffer.add(state, _entry(7), 0.0)  # then "runs a stuck handler": never flushes
        added.set()

    thread = threading.Thread(target=worker)
    thread.start()
    assert added.wait(5)
    thread.join(5)
    deadline = time.monotonic() + 5
    while not finish.settled and time.monotonic() < deadline:
        buffer.flush_stale()  # settles only what has waited over a millisecond

    assert finish.settled == [7]
    assert _processed(state) == 1


class _BrokenTimestamp(_Msg):
    def timestamp(self) -> tuple[int, int]:
        raise RuntimeError("metrics blew up")


def test_an_exception_while_accounting_never_loses_the_successes() -> None:
    """Successes are taken out of the buffer before their metrics are recorded: if recording
    raises, they must still be settled, or their keys stay busy and the cursor pinned for good
    (issue 10, item 2)."""
    finish = FakeFinish()
    buffer = SettlementBuffer(finish)
    state = _state()
    buffer.add(state, Entry(0, b"k", 0, _BrokenTimestamp(), 0.0, True), 0.001)
    buffer.add(state, _entry(1), 0.001)
    buffer.flush_mine()

    assert finish.settled == [0, 1]


def test_the_slowest_key_sketch_is_safe_against_a_concurrent_clear() -> None:
    """Workers add to the slowest-key sketch while the poll thread clears it every minute."""
    state = _state()
    stop = threading.Event()
    errors: list[BaseException] = []

    def clear() -> None:
        while not stop.is_set():
            state.stats.reset()

    def add() -> None:
        try:
            for i in range(20_000):
                state.stats.note_slow([(b"k%d" % (i % 500), 0.001)])
        except BaseException as exc:
            errors.append(exc)

    clearer = threading.Thread(target=clear)
    clearer.start()
    adders = [threading.Thread(target=add) for _ in range(3)]
    for thread in adders:
        thread.start()
    for thread in adders:
        thread.join(60)
    stop.set()
    clearer.join(10)
    assert errors == []


def test_account_counts_each_partition_of_a_mixed_group_and_ignores_an_empty_one() -> None:
    """One partition takes a fast path without grouping; a mix is still counted per partition."""
    one, two = _state(), _state()
    account([])
    account([(one, _entry(0), 0.001), (one, _entry(1), 0.001)])
    account([(one, _entry(2), 0.001), (two, _entry(0), 0.001), (one, _entry(3), 0.001)])
    assert _processed(one) == 4
    assert _processed(two) == 1
