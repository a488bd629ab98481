"""Moves records from the poll thread through the windows to the workers and back.

The dispatcher is the only code that touches the windows, always under one lock: the poll thread
admits records, workers report outcomes, the scheduler re-dispatches retries. Everything it does
under the lock is bookkeeping; handlers, DLQ writes and key-state writes run outside it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from keyshared.core.filters import KeyFilter
from keyshared.core.ring import WorkerRing
from keyshared.core.window import Entry, InFlightWindow
from keyshared.kafka.partition import Blocked, PartitionState, Phase
from keyshared.settings import ConsumerOptions

__all__ = ["Dispatcher", "Work"]

log = logging.getLogger(__name__)

Work = tuple[PartitionState, Entry[Any]]

# Busiest-key tracking samples one record in eight (weighted x8): hot keys stay visible and
# the sketch costs an eighth of its price on the per-record path.
_SAMPLE_MASK = 7
_SAMPLE_WEIGHT = 8.0
_WORKER_CACHE_SIZE = 1 << 16


class Dispatcher:
    """Admission, dispatch, completion, release and drain of every assigned partition.

    :param options: the consumer's options (window sizes, filters, null-key ordering, mode).
    :param workers: how many workers the ring spreads keys over.
    :param submit: hands an entry to a worker; must not block.
    """

    def __init__(
        self,
        options: ConsumerOptions,
        workers: int,
        submit: Callable[[int, list[Work]], None],
        on_draining: Callable[[list[PartitionState]], None] | None = None,
    ) -> None:
        self._options = options
        self._ring = WorkerRing(range(workers))
        self._filter = KeyFilter(options.key_filters) if options.key_filters else None
        self._serial = options.mode == "exclusive"  # one ordered lane per partition
        self._submit = submit
        self._on_draining = on_draining
        self._round_robin = itertools.cycle(range(workers))
        self._workers = workers
        self._worker_cache: dict[bytes, int] = {}
        self.lock = threading.Lock()
        self._idle = threading.Condition(self.lock)

    # -- poll thread -------------------------------------------------------------------------

    def new_window(self, state: PartitionState, first_offset: int) -> InFlightWindow[Any]:
        start = state.committed if state.committed is not None else first_offset
        return InFlightWindow(
            min(start, first_offset),
            max_window=self._options.max_window,
            per_worker_capacity=self._options.per_worker_capacity,
            null_keys_ordered=self._options.null_keys_ordered or self._serial,
            already_done=state.already_done,
        )

    def admit(self, state: PartitionState, messages: list[Any]) -> None:
        """Admit a partition's messages in offset order and dispatch what may start.

        Ready records go to each worker as one list per call, so a batch of a thousand
        records costs a handful of queue hand-offs instead of a thousand thread wake-ups.
        """
        now = time.monotonic()
        metrics = state.metrics
        accepts = self._filter.accepts if self._filter is not None else None
        serial = self._serial
        unordered_nulls = not self._options.null_keys_ordered
        cache = self._worker_cache
        ready: dict[int, list[Work]] = {}
        started = skipped = 0
        with self.lock:
            if state.phase is not Phase.ACTIVE:
                return
            window = state.window
            for msg in messages:
                offset = msg.offset()
                if window is None:
                    window = state.window = self.new_window(state, offset)
                key = msg.key()
                if not offset & _SAMPLE_MASK:
                    state.busiest.add(key or b"", _SAMPLE_WEIGHT)
                if accepts is not None and not accepts(key):
                    window.admit_finished(offset)
                    metrics.filtered.inc()
                    continue
                if serial:
                    lane_key: bytes | None = None
                    worker = state.partition % self._workers
                elif key is None and unordered_nulls:
                    lane_key, worker = None, next(self._round_robin)
                else:
                    lane_key = key
                    cached = cache.get(key or b"")
                    worker = self._worker_for(key or b"") if cached is None else cached
                entry = window.admit(offset, lane_key, worker, msg, now)
                if entry is not None:
                    started += 1
                    works = ready.get(worker)
                    if works is None:
                        ready[worker] = [(state, entry)]
                    else:
                        works.append((state, entry))
                elif window.get(offset) is None:
                    skipped += 1
            state.running += started
            for worker, works in ready.items():
                self._submit(worker, works)
        metrics.received.inc(len(messages))
        if skipped:
            metrics.skipped_done.inc(skipped)

    def _worker_for(self, key: bytes) -> int:
        """The ring's worker for ``key``, memoised: hashing costs more than a dict lookup."""
        cache = self._worker_cache
        worker = cache.get(key)
        if worker is None:
            if len(cache) >= _WORKER_CACHE_SIZE:
                cache.clear()
            worker = cache[key] = self._ring.worker_for(key)
        return worker

    # -- workers -----------------------------------------------------------------------------

    def finish(self, state: PartitionState, entry: Entry[Any]) -> None:
        """The entry reached a terminal outcome: free its key, dispatch what that releases."""
        self.finish_many([(state, entry)])

    def finish_many(self, works: list[Work], *, wait: bool = True) -> bool:
        """Settle several finished entries under one lock acquisition.

        With ``wait=False`` nothing happens and False is returned when the lock is busy: a
        worker with more records to run is better off running them than queueing on the lock
        (and handing the GIL around) while the poll thread admits a batch.
        """
        if not self.lock.acquire(blocking=wait):
            return False
        try:
            self._finish_locked(works)
        finally:
            self.lock.release()
        return True

    def _finish_locked(self, works: list[Work]) -> None:
        ready: dict[int, list[Work]] = {}
        for state, entry in works:
            state.running -= 1
            if state.phase is not Phase.ACTIVE or state.window is None:
                if state.phase is Phase.DRAINING and state.window is not None:
                    state.window.complete(entry.offset)  # counts for the final commit
                self._idle.notify_all()
                continue
            for nxt in state.window.complete(entry.offset):
                state.running += 1
                ready.setdefault(nxt.worker, []).append((state, nxt))
        for worker, batch in ready.items():
            self._submit(worker, batch)

    def abandon(self, state: PartitionState) -> None:
        """A worker will not run an entry of a partition that is no longer active."""
        with self.lock:
            state.running -= 1
            self._idle.notify_all()

    def is_active(self, state: PartitionState) -> bool:
        return state.phase is Phase.ACTIVE

    def retry_later(
        self,
        state: PartitionState,
        entry: Entry[Any],
        delay: float,
        call_later: Callable[[float, Callable[[], None]], None],
    ) -> None:
        """Keep the key blocked while the entry waits out its backoff off the workers."""
        with self.lock:
            state.running -= 1
            entry.attempt += 1
            if state.phase is not Phase.ACTIVE:
                self._idle.notify_all()
                return
        call_later(delay, lambda: self._redispatch(state, entry))

    def _redispatch(self, state: PartitionState, entry: Entry[Any]) -> None:
        with self.lock:
            if state.phase is Phase.ACTIVE:
                state.running += 1
                self._submit(entry.worker, [(state, entry)])

    def block(self, state: PartitionState, entry: Entry[Any], error: str) -> None:
        """Hold the entry (and so its key and the cursor) until an operator releases it."""
        with self.lock:
            state.running -= 1
            state.blocked[entry.key] = Blocked(entry, error, time.time())
            self._idle.notify_all()

    def release(self, state: PartitionState, key: bytes | None, *, retry: bool) -> str | None:
        """Release a blocked or parked key; say what was released, or None if neither.

        A blocked record is skipped (counted done) or, with ``retry``, run again from attempt
        1. On a partition that is no longer active the block is only forgotten: the record is
        still incomplete, so the next owner gets it again.
        """
        with self.lock:
            released = "parked" if key in state.parked else None
            state.parked.discard(key)
            blocked = state.blocked.pop(key, None)
            if blocked is None:
                return released
            if state.phase is not Phase.ACTIVE:
                return "blocked"
            state.running += 1
            if retry:
                blocked.entry.attempt = 1
                blocked.entry.first_failure = None
                self._submit(blocked.entry.worker, [(state, blocked.entry)])
                return "blocked"
        self.finish(state, blocked.entry)
        return "blocked"

    # -- rebalance ---------------------------------------------------------------------------

    def stop_dispatching(self, states: list[PartitionState]) -> None:
        with self.lock:
            for state in states:
                if state.phase is Phase.ACTIVE:
                    state.phase = Phase.DRAINING
        if self._on_draining is not None:
            self._on_draining(states)

    def wait_drained(self, states: list[PartitionState], timeout: float) -> bool:
        """Wait until no entry of ``states`` is owned by a worker or a write; False on timeout."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while any(s.running > 0 for s in states):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
            return True

    def remove(self, states: Iterable[PartitionState]) -> None:
        with self.lock:
            for state in states:
                state.phase = Phase.GONE
                if state.window is not None:
                    state.window.remove()
            self._idle.notify_all()
