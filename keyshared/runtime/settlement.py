"""Settling successes in small groups without ever holding one behind a slow handler.

Settling a success takes the dispatcher's lock (to free its key) and records its metrics; with
fast handlers, doing that once per few dozen records instead of once per record is most of the
throughput. The danger of batching is a success held back while its thread runs a slow or stuck
handler: its key, and the commit cursor, would wait on an unrelated record. So a thread's
pending successes are settled

- when 32 have gathered,
- before a handler starts if the oldest has waited over a millisecond,
- when the thread runs out of work, and
- by :meth:`SettlementBuffer.flush_stale`, which the poll loop calls several times a second,
  for any thread whose pending successes are older than a millisecond (its thread is busy).

The first two only *try*: if the dispatcher's lock is busy (the poll thread is admitting a
batch), the thread runs its next record instead of queueing on the lock. Queueing there was
the largest cost with fast handlers: each blocked worker hands the GIL to the next, and the
poll thread, which holds the lock, waits behind all of them to get the GIL back. The last two
always settle, so a success still waits at most about a poll-loop iteration.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from keyshared.core.window import Entry
from keyshared.metrics.batch import observe_many
from keyshared.runtime.partition import PartitionState

__all__ = ["LoopSettlement", "SettlementBuffer", "Success", "account"]

log = logging.getLogger(__name__)

Success = tuple[PartitionState, Entry[Any], float]  # state, entry, handler seconds

# (successes, *, wait) -> settled; the dispatcher's finish_many, which takes the successes as
# they are (it reads the state and entry of each), so settling copies nothing per record.
FinishMany = Callable[..., bool]

_MAX_PENDING = 32
_MAX_HELD = 4096  # past this many unsettled successes a thread waits for the lock after all
_MAX_AGE = 1e-3  # seconds a success may wait to be settled while its thread is running


class _Pending:
    __slots__ = ("accounted", "lock", "next_try", "retry_at", "since", "successes")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.successes: list[Success] = []
        self.accounted = 0  # leading successes whose metrics are recorded (a settle deferred)
        self.next_try = _MAX_PENDING  # settle when this many have gathered
        self.retry_at = 0.0  # after a refused attempt, the age trigger waits until then
        self.since = 0.0


class SettlementBuffer:
    """Per-thread buffers of successes, settled through ``finish_many``.

    :param finish_many: frees the keys of finished entries (the dispatcher's).
    """

    def __init__(self, finish_many: FinishMany):
        self._finish_many = finish_many
        self._local = threading.local()
        self._all: list[_Pending] = []
        self._all_lock = threading.Lock()

    def _mine(self) -> _Pending:
        pending: _Pending | None = getattr(self._local, "pending", None)
        if pending is None:
            pending = self._local.pending = _Pending()
            with self._all_lock:
                self._all.append(pending)
        return pending

    def add(self, state: PartitionState, entry: Entry[Any], elapsed: float) -> None:
        """A success on this thread; settled now if enough have gathered."""
        pending = self._mine()
        with pending.lock:
            if not pending.successes:
                pending.since = time.monotonic()
            pending.successes.append((state, entry, elapsed))
            held = len(pending.successes)
        if held >= pending.next_try:
            self._settle(pending, wait=held >= _MAX_HELD)

    def before_handler(self) -> None:
        """Settle this thread's successes if they have waited too long already."""
        pending = getattr(self._local, "pending", None)
        if pending is None or not pending.successes:
            return
        now = time.monotonic()
        if now - pending.since > _MAX_AGE and now >= pending.retry_at:
            self._settle(pending, wait=False)

    def flush_mine(self) -> None:
        """This thread has no more work for now: settle everything it holds."""
        pending = getattr(self._local, "pending", None)
        if pending is not None and pending.successes:
            self._settle(pending)

    def settle_now(self, successes: list[Success]) -> None:
        """Settle ``successes`` at once, waiting for the lock: a batch handler's records are a
        group already, and holding them back would only delay their keys' next records."""
        try:
            account(successes)
        except Exception:
            log.exception("recording metrics of %d successes failed", len(successes))
        finally:
            self._finish_many(successes)

    def flush_stale(self) -> None:
        """Settle other threads' successes that waited too long (their thread is busy)."""
        now = time.monotonic()
        with self._all_lock:
            stale = [p for p in self._all if p.successes and now - p.since > _MAX_AGE]
        for pending in stale:
            self._settle(pending)

    def _settle(self, pending: _Pending, wait: bool = True) -> None:
        with pending.lock:
            successes, pending.successes = pending.successes, []
            accounted, pending.accounted = pending.accounted, 0
            pending.next_try = _MAX_PENDING
        if not successes:
            return
        # Out of the buffer now, so from here they must reach finish_many whatever happens:
        # a success lost here keeps its key busy and the cursor pinned for good.
        try:
            # Metrics first, so that whoever sees a record finished also sees it counted.
            account(successes[accounted:])
        except Exception:
            log.exception("recording metrics of %d successes failed", len(successes))
        finally:
            if not self._finish_many(successes, wait=wait):
                with pending.lock:  # the lock was busy: keep them, oldest first, for next time
                    pending.successes[:0] = successes
                    pending.accounted = len(successes)
                    pending.next_try = len(pending.successes) + _MAX_PENDING
                    pending.retry_at = time.monotonic() + _MAX_AGE / 4


class LoopSettlement:
    """Successes of ``async def`` handlers, settled once per event-loop iteration.

    Every coroutine whose wait ends in the same iteration of the loop (a thousand sleeping
    handlers wake in bursts) adds its success here; the first one schedules :meth:`flush` with
    ``call_soon``, which runs after the callbacks already ready, i.e. after the rest of the
    burst. One lock acquisition and one metrics update then serve the whole burst. Loop thread
    only: no lock of its own.

    The flush only *tries* the dispatcher's lock. The poll thread holds it while it admits a
    batch, and on a busy machine that can last tens of milliseconds (the poll thread waits for
    the GIL, or for a CPU, with the lock held); a loop blocked on it ran nothing meanwhile,
    although its workers had records waiting that need no lock. Refused, the flush retries
    every ``_LOOP_RETRY`` seconds (the loop sleeps in between if it has nothing else to do,
    releasing the GIL to the lock's holder), and waits for the lock only once the oldest
    refused success has waited ``_LOOP_MAX_DEFER``. Metrics are recorded at the first try, so
    a success is counted before anyone can see it finished.

    :param finish_many: frees the keys of finished entries (the dispatcher's).
    """

    def __init__(self, finish_many: FinishMany):
        self._finish_many = finish_many
        self._successes: list[Success] = []
        self._accounted = 0  # leading successes whose metrics are recorded (a try refused)
        self._scheduled = False  # a flush is on its way (call_soon, or call_later after a refusal)
        self._refused_at: float | None = None  # loop time of the first refused try

    def add(self, state: PartitionState, entry: Entry[Any], elapsed: float) -> None:
        self._successes.append((state, entry, elapsed))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        successes = self._successes
        if not successes:
            return
        try:
            account(successes[self._accounted :])
        except Exception:
            log.exception("recording metrics of %d successes failed", len(successes))
        self._accounted = len(successes)
        loop = asyncio.get_running_loop()
        refused_at = self._refused_at
        wait = refused_at is not None and loop.time() - refused_at >= _LOOP_MAX_DEFER
        self._successes, self._accounted = [], 0
        if self._finish_many(successes, wait=wait):
            self._refused_at = None
            return
        # Refused: keep them, oldest first, and their metrics recorded, for the next try.
        self._successes[:0] = successes
        self._accounted = len(successes)
        if refused_at is None:
            self._refused_at = loop.time()
        self._scheduled = True
        loop.call_later(_LOOP_RETRY, self.flush)


_LOOP_RETRY = 0.0005  # seconds between tries of a refused loop flush
_LOOP_MAX_DEFER = 0.02  # seconds after the first refusal before a loop flush waits for the lock


def account(successes: list[Success]) -> None:
    """Record the metrics of successes (any partitions), in bulk per partition.

    The one place a success is counted, for thread workers and the asyncio runner (in
    batches) and pull style (one at a time) alike.
    """
    if not successes:
        return
    now = time.time()
    first = successes[0][0]
    for success in successes:
        if success[0] is not first:
            break
    else:  # one partition, the usual case: no grouping (a dict operation per success)
        _account(successes, now)
        return
    by_state: dict[int, list[Success]] = {}
    for success in successes:
        by_state.setdefault(id(success[0]), []).append(success)
    for group in by_state.values():
        _account(group, now)


def _account(successes: list[Success], now: float) -> None:
    """The metrics of one partition's successes, recorded in bulk."""
    state = successes[0][0]
    metrics = state.metrics
    metrics.processed.inc(len(successes))
    observe_many(metrics.handler_seconds, [elapsed for _, _, elapsed in successes])
    end_to_end = []
    slow: list[tuple[bytes, float]] = []
    for _, entry, elapsed in successes:
        msg = entry.payload
        ts_type, ts = msg.timestamp()
        if ts_type:
            age = now - ts / 1000.0
            end_to_end.append(age if age > 0.0 else 0.0)
        if not entry.offset & 7:  # sampled like the busiest-key sketch
            slow.append((msg.key() or b"", elapsed * 8))
    observe_many(metrics.end_to_end_seconds, end_to_end)
    if slow:
        state.stats.note_slow(slow)
