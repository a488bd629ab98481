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

from keyshared.core.modes import Mode
from keyshared.core.ring import WorkerRing
from keyshared.core.split_keys import SplitKeyDetector
from keyshared.core.window import Entry, InFlightWindow
from keyshared.runtime.control import Accepts, KeyFilterOwnership, Ownership
from keyshared.runtime.dispatch_gate import DispatchGate
from keyshared.runtime.partition import Blocked, PartitionState, Phase
from keyshared.settings import ConsumerOptions

__all__ = ["Dispatcher", "Work"]

log = logging.getLogger(__name__)

Work = tuple[PartitionState, Entry[Any]]

# Busiest-key tracking samples one record in eight (weighted x8): hot keys stay visible and
# the sketch costs an eighth of its price on the per-record path.
_SAMPLE_MASK = 7
_SAMPLE_WEIGHT = 8.0
_WORKER_CACHE_SIZE = 1 << 16
_DRAIN_TICK = 0.005  # seconds between the poll loop's care while a drain waits


class Dispatcher(DispatchGate):
    """Admission, dispatch, completion, release and drain of every assigned partition.

    :param options: the consumer's options (window sizes, filters, null-key ordering, mode).
    :param workers: how many workers the ring spreads keys over.
    :param submit: hands an entry to a worker; must not block.
    :param on_draining: told which partitions stopped dispatching (the pull queue drops what
        it queued for them).
    :param ownership: which records this member runs; default: the options' key filters.
    """

    def __init__(
        self,
        options: ConsumerOptions,
        workers: int,
        submit: Callable[[int, list[Work]], None],
        on_draining: Callable[[list[PartitionState]], None] | None = None,
        ownership: Ownership | None = None,
    ) -> None:
        self._options = options
        self._ring = WorkerRing(range(workers))
        self._ownership = ownership or KeyFilterOwnership(options.key_filters)
        self._serial = options.mode is Mode.EXCLUSIVE  # one ordered lane per partition
        super().__init__()  # the pause, the liveness check and the hold (dispatch_gate.py)
        self._submit = submit
        self._on_draining = on_draining
        self._round_robin = itertools.cycle(range(workers))
        self._workers = workers
        self._worker_cache: dict[bytes, int] = {}
        # Keys seen in two partitions of a topic (mixed producer partitioners); sampled by
        # key hash, reported by the poll loop with the gauges (see core.split_keys).
        self.split_keys = SplitKeyDetector()
        self.lock = threading.Lock()
        self._idle = threading.Condition(self.lock)

    def use_ownership(self, ownership: Ownership) -> None:
        """Decide ownership with ``ownership`` from now on (wired before the first record)."""
        self._ownership = ownership

    def admission(self, state: PartitionState) -> Accepts | None:
        """Which records of ``state`` this member runs (None: all), as admission decides."""
        return self._ownership.admission(state)

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
        serial = self._serial
        unordered_nulls = not self._options.null_keys_ordered
        cache = self._worker_cache
        splits = self.split_keys
        split_mask = splits.mask
        hash_of = hash  # a local: saves the builtins lookup per record
        ready: dict[int, list[Work]] = {}
        started = 0
        with self.lock:
            if state.phase is not Phase.ACTIVE:
                self._give_back(state, messages)
                return
            accepts = self._ownership.admission(state)
            window = state.window
            done_before = window.done_on_arrival if window is not None else 0
            stats = state.stats
            for msg in messages:
                offset = msg.offset()
                if window is None:
                    window = state.window = self.new_window(state, offset)
                key = msg.key()
                if key is not None:
                    # hash() is cached on the key object: the worker lookup below reuses it.
                    key_hash = hash_of(key)
                    if not key_hash & split_mask:
                        splits.note(state.topic, state.partition, key_hash, key)
                if not offset & _SAMPLE_MASK:
                    stats.note_received(key or b"", _SAMPLE_WEIGHT)
                if accepts is not None and not accepts(key, offset):
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
            skipped = window.done_on_arrival - done_before if window is not None else 0
            state.running += started
            for worker, works in ready.items():
                self._dispatch(worker, works)
        metrics.received.inc(len(messages))
        if skipped:
            metrics.skipped_done.inc(skipped)

    def _give_back(self, state: PartitionState, messages: list[Any]) -> None:
        """Records delivered to a draining partition are not run: hold the cursor below them."""
        if state.phase is Phase.GONE or not messages:
            return
        first = messages[0].offset()
        if state.window is None:
            state.window = self.new_window(state, first)
        state.window.give_back(first)

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
            try:
                self._finish_one(state, entry, ready)
            except Exception:
                # A bookkeeping error (e.g. an entry settled twice) is a bug to report, but
                # the rest of the batch must still be settled, or their keys stay busy.
                log.exception("settling %s@%d failed; settling the rest", state, entry.offset)
        for worker, batch in ready.items():
            self._dispatch(worker, batch)

    def _finish_one(
        self, state: PartitionState, entry: Entry[Any], ready: dict[int, list[Work]]
    ) -> None:
        window = state.window
        if state.phase is not Phase.ACTIVE or window is None:
            if state.phase is Phase.DRAINING and window is not None:
                window.complete(entry)  # counts for the final commit
                if state.outputs.staged:
                    state.outputs.release(entry.offset)
            state.running -= 1
            entry.payload = None
            self._idle.notify_all()
            self._ended(state, entry)
            return
        released = window.complete(entry)
        if state.outputs.staged:  # exactly-once: its outputs go with the next commit
            state.outputs.release(entry.offset)
        state.running += len(released) - 1  # this one finished; the released ones run
        entry.payload = None  # finished: drop the message now, whoever still holds the entry
        for nxt in released:
            works = ready.get(nxt.worker)
            if works is None:
                ready[nxt.worker] = [(state, nxt)]
            else:
                works.append((state, nxt))

    def abandon(self, state: PartitionState, entry: Entry[Any] | None = None) -> None:
        """A worker will not run an entry of a partition that is no longer active (or a DLQ
        or key-state write of one was abandoned)."""
        with self.lock:
            state.running -= 1
            self._idle.notify_all()
            self._ended(state, entry)

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
                self._ended(state, entry)
                return
        call_later(delay, lambda: self._redispatch(state, entry))

    def _redispatch(self, state: PartitionState, entry: Entry[Any]) -> None:
        with self.lock:
            if state.phase is Phase.ACTIVE:
                state.running += 1
                self._dispatch(entry.worker, [(state, entry)])

    def block(self, state: PartitionState, entry: Entry[Any], error: str) -> None:
        """Hold the entry (and so its key and the cursor) until an operator releases it."""
        with self.lock:
            state.running -= 1
            blocked = Blocked(entry, error, time.time())
            if entry.ordered:
                state.blocked[entry.key] = blocked
            else:  # unordered null-key records are independent: one block each
                state.blocked_unordered[entry.offset] = blocked
            self._idle.notify_all()
            self._ended(state, entry)

    def release(self, state: PartitionState, key: bytes | None, *, retry: bool) -> str | None:
        """Release a blocked or parked key; say what was released, or None if neither.

        A blocked record is skipped (counted done) or, with ``retry``, run again from attempt
        1. On a partition that is no longer active the block is only forgotten: the record is
        still incomplete, so the next owner gets it again. Releasing the null key releases
        every blocked unordered null-key record of the partition.
        """
        with self.lock:
            released = "parked" if key in state.parked else None
            state.parked.discard(key)
            entries = []
            blocked = state.blocked.pop(key, None)
            if blocked is not None:
                entries.append(blocked.entry)
            if key is None and state.blocked_unordered:
                entries.extend(b.entry for b in state.blocked_unordered.values())
                state.blocked_unordered.clear()
            if not entries:
                return released
            if state.phase is not Phase.ACTIVE:
                return "blocked"
            state.running += len(entries)
            if retry:
                for entry in entries:
                    entry.attempt = 1
                    entry.first_failure = None
                    self._dispatch(entry.worker, [(state, entry)])
                return "blocked"
        self.finish_many([(state, entry) for entry in entries])
        return "blocked"

    # -- rebalance ---------------------------------------------------------------------------

    def stop_dispatching(self, states: list[PartitionState]) -> None:
        with self.lock:
            for state in states:
                if state.phase is Phase.ACTIVE:
                    state.phase = Phase.DRAINING
            if self._held:
                self._drop_held(states)
            self._withdraw(states)
        if self._on_draining is not None:
            self._on_draining(states)

    def wait_drained(
        self,
        states: list[PartitionState],
        timeout: float,
        tick: Callable[[], None] | None = None,
    ) -> bool:
        """Wait until no entry of ``states`` is owned by a worker or a write; False on timeout.

        ``tick`` runs (outside the lock) every few milliseconds while waiting. The poll loop
        passes the care it normally gives between polls (settling successes that a busy thread
        holds, letting idle threads take queued records): a drain blocks the poll thread, and
        without that care it waited for work that only the poll thread would have moved.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                remaining = deadline - time.monotonic()
                if not any(s.running > 0 for s in states):
                    return True
                if remaining <= 0:
                    return False
                self._idle.wait(min(remaining, _DRAIN_TICK) if tick is not None else remaining)
            if tick is not None:
                tick()

    def remove(self, states: Iterable[PartitionState]) -> None:
        """The partitions are gone: results still to come are discarded. Calls of theirs still
        running are reported to the hold, which keeps their keys from starting again here
        until they end."""
        states = list(states)
        hold = self._hold
        with self.lock:
            dropped = self._drop_held(states) if self._held else set()
            self._withdraw(states)
            for state in states:
                state.phase = Phase.GONE
                if state.window is None:
                    continue
                drain = state.window.remove()
                if hold is not None and state.running > 0:
                    # In flight but not running: dropped from the paused queue, or blocked
                    # (a record in its backoff stays counted until its source is idle).
                    idle = dropped | {id(b.entry) for b in state.blocked.values()}
                    idle |= {id(b.entry) for b in state.blocked_unordered.values()}
                    hold.fenced(state, [e for e in drain.in_flight if id(e) not in idle])
            self._idle.notify_all()
