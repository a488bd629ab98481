"""Moves records from the poll thread through the windows to the workers and back.

The dispatcher is the only code that touches the windows, and its lock never leaves it: the
poll thread admits records, workers report outcomes, the scheduler re-dispatches retries, and
everyone else (the committers, the samplers, the modes) asks it for what they need through one
of its methods, each marked with who calls it and what it affects. Everything it does under the
lock is bookkeeping; handlers, DLQ writes and key-state writes run outside it.

When a ready record may not start yet:

- **holds**: named tokens (``zookeeper-connection``, ``zookeeper-liveness``, ...). While any is
  in place nothing starts; what becomes ready queues, in order, until the last is lifted. Whoever
  takes a hold lifts it; :meth:`Dispatcher.holds` names them and their age for ``/readyz``, the
  metrics and logs;
- **liveness**: a coordinator's "may I still run?"; a record found not live takes the
  ``zookeeper-liveness`` hold, which the coordinator lifts on its next proof of life;
- **fenced keys** (every mode): a record whose key still has a call running in a removed
  partition state (a lost session, an exactly-once redo, a drain that timed out) waits for
  that call, alone; the other keys go on. The removed states with calls still running are the
  partition's *stragglers* (:meth:`Dispatcher.stragglers`): whatever hands a partition over
  waits for them as well as for the state it knows.

Settlement comes in batches (:meth:`Dispatcher.finish_many`, one lock acquisition): each run of
entries of one active partition is completed in one window step, which the window guarantees
equal to completing them one by one, so a batch moves every state exactly as its records
settled in turn would; entries of a partition that is no longer active go one by one.

A record waiting out its retry backoff counts as running (its key is busy and its window may
not be replaced under it) until it runs again or its partition stops dispatching.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from keyshared.core.entry import CursorBlocker
from keyshared.core.modes import Mode
from keyshared.core.ring import WorkerRing
from keyshared.core.runs import OffsetRuns
from keyshared.core.split_keys import SplitKeyDetector
from keyshared.core.types import TP
from keyshared.core.window import Entry, InFlightWindow
from keyshared.runtime.control import Accepts, KeyFilterOwnership, Ownership
from keyshared.runtime.fenced_keys import FencedKeys
from keyshared.runtime.partition import Blocked, PartitionPhase, PartitionState
from keyshared.settings import ConsumerOptions

__all__ = ["LIVENESS_HOLD", "Dispatcher", "Progress", "WindowFigures", "Work"]

log = logging.getLogger(__name__)

Work = tuple[PartitionState, Entry[Any]]
# What finish_many takes: works, or successes that carry their handler time as a third item
# (the settlement buffers pass theirs as they are, without a copy per record).
Settled = Work | tuple[PartitionState, Entry[Any], float]

# Busiest-key tracking samples one record in eight (weighted x8): hot keys stay visible and
# the sketch costs an eighth of its price on the per-record path.
_SAMPLE_MASK = 7
_SAMPLE_WEIGHT = 8.0
_WORKER_CACHE_SIZE = 1 << 16
_DRAIN_TICK = 0.005  # seconds between the poll loop's care while a drain waits

LIVENESS_HOLD = "zookeeper-liveness"  # taken by dispatch, lifted by the liveness owner

Progress = tuple[TP, int, OffsetRuns, int]  # (partition, safe cursor, finished above, seen end)


@dataclass(frozen=True, slots=True)
class WindowFigures:
    """One window's gauges, read in one step (:meth:`Dispatcher.figures`)."""

    in_flight: int
    waiting: int
    busy_keys: int
    blocked_keys: int
    safe_cursor: int | None
    blocker: CursorBlocker | None


class Dispatcher:
    """Admission, dispatch, completion, release and drain of every assigned partition; the
    one owner of the windows, their lock and the holds on dispatch (see the module).

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
        self._holds: dict[str, float] = {}  # name -> monotonic time it was taken
        self._held: list[tuple[int, list[Work]]] | None = None  # ready while a hold is in place
        # A coordinator's "may I still run?" (None: nothing to ask). Read directly by the
        # executor, which asks it per record: a call to live() per record cost more.
        self.liveness: Callable[[], bool] | None = None
        self._fenced = FencedKeys()  # keys waiting for calls of removed states
        self._fencing = False  # whether any such call runs: the common path asks nothing more
        self._stragglers: dict[TP, list[PartitionState]] = {}  # removed, calls still running
        self._submit = submit
        self._on_draining = on_draining
        self._round_robin = itertools.cycle(range(workers))
        self._workers = workers
        self._worker_cache: dict[bytes, int] = {}
        # Keys seen in two partitions of a topic (mixed producer partitioners); sampled by
        # key hash, reported by the poll loop with the gauges (see core.split_keys).
        self.split_keys = SplitKeyDetector()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        # Exactly-once held outputs (:meth:`pressure`): partitions paused for them, whether
        # that pause was announced, and the bytes seen last.
        self._held_by_outputs: set[TP] = set()
        self._outputs_over = False
        self.held_output_bytes = 0

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
        if not messages:
            return
        serial = self._serial
        unordered_nulls = not self._options.null_keys_ordered
        cache = self._worker_cache
        splits = self.split_keys
        split_mask = splits.mask
        hash_of = hash  # a local: saves the builtins lookup per record
        ready: dict[int, list[Work]] = {}
        sampled: list[bytes] = []  # busiest-key samples, noted once per batch
        started = 0
        with self._lock:
            if state.phase is not PartitionPhase.ACTIVE:
                self._give_back(state, messages)
                return
            accepts = self._ownership.admission(state)
            window = state.window
            if window is None:
                window = state.window = self.new_window(state, messages[0].offset())
            done_before = window.done_on_arrival
            admit = window.admit
            for msg in messages:
                offset = msg.offset()
                key = msg.key()
                if key is not None:
                    # hash() is cached on the key object: the worker lookup below reuses it.
                    key_hash = hash_of(key)
                    if not key_hash & split_mask:
                        splits.note(state.topic, state.partition, key_hash, key)
                if not offset & _SAMPLE_MASK:
                    sampled.append(key or b"")
                if accepts is not None and not accepts(key, offset):
                    window.admit_finished(offset)
                    metrics.filtered.inc()
                    continue
                if serial:
                    lane_key: bytes | None = None
                    worker = state.partition % self._workers
                elif key is None:
                    if unordered_nulls:
                        lane_key, worker = None, next(self._round_robin)
                    else:
                        lane_key = None
                        cached = cache.get(b"")
                        worker = self._worker_for(b"") if cached is None else cached
                else:
                    lane_key = key
                    cached = cache.get(key)
                    worker = self._worker_for(key) if cached is None else cached
                entry = admit(offset, lane_key, worker, msg, now)
                if entry is not None:
                    started += 1
                    works = ready.get(worker)
                    if works is None:
                        ready[worker] = [(state, entry)]
                    else:
                        works.append((state, entry))
            skipped = window.done_on_arrival - done_before
            state.running += started
            for worker, works in ready.items():
                self._dispatch(worker, works)
        if sampled:
            state.stats.note_received_many(sampled, _SAMPLE_WEIGHT)
        metrics.received.inc(len(messages))
        if skipped:
            metrics.skipped_done.inc(skipped)

    def _give_back(self, state: PartitionState, messages: list[Any]) -> None:
        """Records delivered to a draining partition are not run: hold the cursor below them."""
        if state.phase is PartitionPhase.GONE or not messages:
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

    def finish_many(self, works: Sequence[Settled], *, wait: bool = True) -> bool:
        """Settle several finished entries under one lock acquisition.

        With ``wait=False`` nothing happens and False is returned when the lock is busy: a
        worker with more records to run is better off running them than queueing on the lock
        (and handing the GIL around) while the poll thread admits a batch.
        """
        if not self._lock.acquire(blocking=wait):
            return False
        try:
            self._finish_locked(works)
        finally:
            self._lock.release()
        return True

    def _finish_locked(self, works: Sequence[Settled]) -> None:
        """Settle ``works`` (lock held): each run of entries of one active partition in one
        window step (:meth:`InFlightWindow.complete_many`), anything else record by record."""
        ready: dict[int, list[Work]] = {}
        group: list[Entry[Any]] = []
        current: PartitionState | None = None
        for work in works:
            state = work[0]
            if state is not current:
                if group:
                    self._finish_group(current, group, ready)  # type: ignore[arg-type]
                    group = []
                current = state
            group.append(work[1])
        if group:
            self._finish_group(current, group, ready)  # type: ignore[arg-type]
        for worker, batch in ready.items():
            self._dispatch(worker, batch)

    def _finish_group(
        self, state: PartitionState, entries: list[Entry[Any]], ready: dict[int, list[Work]]
    ) -> None:
        """Settle finished entries of one partition state (lock held): one window step, one
        update of the running count, the released records grouped by worker."""
        window = state.window
        if state.phase is not PartitionPhase.ACTIVE or window is None:
            for entry in entries:
                self._finish_safely(state, entry, ready)
            return
        released: list[Entry[Any]] = []
        refused: list[Entry[Any]] = []
        try:
            window.complete_many(entries, released, refused)
        except Exception:
            # A bookkeeping error is a bug to report, but the rest of the batch must still be
            # settled, or their keys stay busy: the entries the window did not reach go on one
            # by one (the one that raised is marked done and counts as settled).
            log.exception("settling %d records of %s failed; settling the rest", len(entries),
                          state)  # fmt: skip
            rest = [entry for entry in entries if not entry.done]
            entries = [entry for entry in entries if entry.done]
            self._settled(state, entries, released, refused, ready)
            for entry in rest:
                self._finish_safely(state, entry, ready)
            return
        self._settled(state, entries, released, refused, ready)

    def _settled(
        self,
        state: PartitionState,
        entries: list[Entry[Any]],
        released: list[Entry[Any]],
        refused: list[Entry[Any]],
        ready: dict[int, list[Work]],
    ) -> None:
        """The window completed ``entries`` (but ``refused``) and released ``released``."""
        if refused:
            for entry in refused:
                log.error("settling %s@%d failed: it is not in flight (settled twice?); "
                          "settling the rest", state, entry.offset)  # fmt: skip
            skip = {id(entry) for entry in refused}
            entries = [entry for entry in entries if id(entry) not in skip]
        outputs = state.outputs
        if outputs.staged:  # exactly-once: their outputs go with the next commit, in order
            for entry in entries:
                outputs.release(entry.offset)
        state.running += len(released) - len(entries)  # these finished; the released run
        for entry in entries:
            entry.payload = None  # finished: drop the message now, whoever still holds it
        _queue_released(state, released, ready)

    def _finish_safely(
        self, state: PartitionState, entry: Entry[Any], ready: dict[int, list[Work]]
    ) -> None:
        try:
            self._finish_one(state, entry, ready)
        except Exception:
            # A bookkeeping error (e.g. an entry settled twice) is a bug to report, but
            # the rest of the batch must still be settled, or their keys stay busy.
            log.exception("settling %s@%d failed; settling the rest", state, entry.offset)

    def _finish_one(
        self, state: PartitionState, entry: Entry[Any], ready: dict[int, list[Work]]
    ) -> None:
        window = state.window
        if state.phase is not PartitionPhase.ACTIVE or window is None:
            if state.phase is PartitionPhase.DRAINING and window is not None:
                for successor in window.complete(entry):  # counts for the final commit
                    state.never_run.add(id(successor))  # released, never to start here
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
        _queue_released(state, released, ready)

    def abandon(self, state: PartitionState, entry: Entry[Any] | None = None) -> None:
        """A worker will not run an entry of a partition that is no longer active (or a DLQ
        or key-state write of one was abandoned)."""
        with self._lock:
            state.running -= 1
            self._idle.notify_all()
            self._ended(state, entry)

    def is_active(self, state: PartitionState) -> bool:
        return state.phase is PartitionPhase.ACTIVE

    def retry_later(
        self,
        state: PartitionState,
        entry: Entry[Any],
        delay: float,
        call_later: Callable[[float, Callable[[], None]], None],
    ) -> None:
        """Keep the key busy while the entry waits out its backoff off the workers.

        Caller: a worker whose call failed with attempts left. Affects: the entry stays
        counted as running (its window is not replaced under it) and is remembered in
        ``state.backing_off`` until it runs again or its partition stops dispatching, which
        withdraws it (:meth:`_withdraw_retries`): a timer that fires after that finds it gone.
        """
        with self._lock:
            entry.attempt += 1
            if state.phase is not PartitionPhase.ACTIVE:
                state.running -= 1
                self._idle.notify_all()
                self._ended(state, entry)
                return
            state.backing_off[id(entry)] = entry
        call_later(delay, lambda: self._redispatch(state, entry))

    def _redispatch(self, state: PartitionState, entry: Entry[Any]) -> None:
        with self._lock:
            if state.backing_off.pop(id(entry), None) is None:
                return  # withdrawn: its partition stopped dispatching or started again
            if state.phase is PartitionPhase.ACTIVE:
                self._dispatch(entry.worker, [(state, entry)])
                return
            state.running -= 1
            self._idle.notify_all()
            self._ended(state, entry)

    def _withdraw_retries(self, state: PartitionState) -> set[int]:
        """Entries of ``state`` waiting out a backoff will not run again here (lock held):
        they stop counting as running. Returns their ids."""
        waiting = state.backing_off
        if not waiting:
            return set()
        ids = set(waiting)
        state.running -= len(waiting)
        state.never_run |= ids
        waiting.clear()
        self._idle.notify_all()
        return ids

    def block(self, state: PartitionState, entry: Entry[Any], error: str) -> None:
        """Hold the entry (and so its key and the cursor) until an operator releases it."""
        with self._lock:
            state.running -= 1
            blocked = Blocked(entry, error, time.time())
            if entry.ordered:
                state.blocked[entry.key] = blocked
            else:  # unordered null-key records are independent: one block each
                state.blocked_unordered[entry.offset] = blocked
            self._idle.notify_all()
            self._ended(state, entry)

    def park(self, state: PartitionState, entry: Entry[Any]) -> None:
        """The entry's dead letter and its key's park are durable: its key's later records
        follow it into the DLQ, and the entry is finished.

        Caller: the executor, once the key-state store confirmed the park. Affects: the
        partition's parked keys, then what :meth:`finish` affects.
        """
        with self._lock:
            state.parked.add(entry.key)
        self.finish(state, entry)

    def release(self, state: PartitionState, key: bytes | None, *, retry: bool) -> str | None:
        """Release a blocked or parked key; say what was released, or None if neither.

        A blocked record is skipped (counted done: a dead letter staged at its block is then
        committed) or, with ``retry``, run again from attempt 1 (that letter dropped). On a
        partition that is no longer active the block is only forgotten: the record is
        still incomplete, so the next owner gets it again. Releasing the null key releases
        every blocked unordered null-key record of the partition.
        """
        with self._lock:
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
            if state.phase is not PartitionPhase.ACTIVE:
                return "blocked"
            state.running += len(entries)
            if retry:
                for entry in entries:
                    entry.attempt = 1
                    entry.first_failure = None
                    # The dead letter staged at the block (exactly-once) was never committed:
                    # the retry's own outcome (outputs, or a new letter) replaces it.
                    state.outputs.staged.pop(entry.offset, None)
                    self._dispatch(entry.worker, [(state, entry)])
                return "blocked"
        self.finish_many([(state, entry) for entry in entries])
        return "blocked"

    # -- rebalance ---------------------------------------------------------------------------
    # -- holds on dispatch ---------------------------------------------------------------------

    def take_hold(self, name: str) -> None:
        """Start nothing new until ``name`` is lifted; records keep being admitted and queue
        up in their keys' order. Handlers already running finish as usual.

        Caller: whoever owns the reason (a coordinator that lost its ZooKeeper connection, the
        dispatch path itself when the liveness check fails). Affects: dispatch, for every
        partition, until every hold is lifted. Taking a hold already in place changes nothing.
        """
        with self._lock:
            self._take_hold(name)

    def _take_hold(self, name: str) -> None:
        if name not in self._holds:
            self._holds[name] = time.monotonic()
            if self._held is None:
                self._held = []

    def lift_hold(self, name: str) -> bool:
        """Lift ``name``; once no hold is left, hand over everything that queued, in the order
        it became ready. Returns whether ``name`` was in place.

        Caller: the owner of the hold. Affects: dispatch. Lifting a hold not in place changes
        nothing, so an owner may lift whenever its reason is gone without asking first.
        """
        with self._lock:
            if self._holds.pop(name, None) is None:
                return False
            if not self._holds:
                held, self._held = self._held, None
                for worker, works in held or ():
                    self._submit(worker, works)
            return True

    def holds(self) -> dict[str, float]:
        """The holds in place and how long each has been (seconds).

        Caller: probes, metrics and logs, on any thread. Affects: nothing.
        """
        now = time.monotonic()
        with self._lock:
            return {name: now - since for name, since in self._holds.items()}

    def set_liveness(self, live: Callable[[], bool]) -> None:
        """Start nothing while ``live()`` is False: a record that becomes ready then takes the
        :data:`LIVENESS_HOLD`, which the owner of ``live`` lifts once it is sure again.

        Caller: a coordinator, before the first record. Affects: dispatch.
        """
        self.liveness = live

    def live(self) -> bool:
        live = self.liveness
        return live is None or live()

    def defer(self, state: PartitionState, entry: Entry[Any]) -> None:
        """A worker found the member not live as it was about to run ``entry``: hold it (still
        counted as running) until the liveness hold is lifted.

        Caller: a worker. Affects: the hold and the queue of held records; an entry of a
        partition that stopped dispatching meanwhile is abandoned instead.
        """
        with self._lock:
            if state.phase is not PartitionPhase.ACTIVE:
                state.running -= 1
                self._idle.notify_all()
                self._ended(state, entry)
                return
            self._take_hold(LIVENESS_HOLD)
            assert self._held is not None
            self._held.append((entry.worker, [(state, entry)]))

    def _dispatch(self, worker: int, works: list[Work]) -> None:
        """Hand ready records to a worker, or queue them while a hold is in place (lock held)."""
        if self._fencing:  # a call of their key in a removed state still runs: they wait
            works = self._fenced.admit(works)
            if not works:
                return
        if self._held is None and self.liveness is not None and not self.liveness():
            self._take_hold(LIVENESS_HOLD)
        if self._held is not None:
            self._held.append((worker, works))
        else:
            self._submit(worker, works)

    def _ended(self, state: PartitionState, entry: Entry[Any] | None) -> None:
        """An entry of a partition no longer active stopped running (lock held): start what
        waited for it."""
        if state.phase is not PartitionPhase.GONE:
            return
        idle = state.running <= 0
        if idle:
            self._forget_straggler(state)
        if not self._fencing:
            return
        fenced = self._fenced
        released = fenced.ended(state, entry, idle)
        self._fencing = bool(fenced)
        for work in released:
            self._dispatch(work[1].worker, [work])

    def _forget_straggler(self, state: PartitionState) -> None:
        stragglers = self._stragglers.get(state.tp)
        if stragglers is not None and state in stragglers:
            stragglers.remove(state)
            if not stragglers:
                del self._stragglers[state.tp]

    def _drop_held(self, states: list[PartitionState]) -> set[int]:
        """Held records of partitions that stop dispatching never run: they stay incomplete in
        their windows (so no cursor passes them) and stop counting as running. Returns the
        ids of their entries."""
        stopping = {id(state) for state in states}
        assert self._held is not None
        kept: list[tuple[int, list[Work]]] = []
        dropped: set[int] = set()
        for worker, works in self._held:
            remaining = [work for work in works if id(work[0]) not in stopping]
            for state, entry in works:
                if id(state) in stopping:
                    state.running -= 1
                    state.never_run.add(id(entry))
                    dropped.add(id(entry))
            if remaining:
                kept.append((worker, remaining))
        self._held = kept
        self._idle.notify_all()
        return dropped

    def _withdraw(self, states: list[PartitionState]) -> None:
        """Records of partitions that stop dispatching, waiting for a fenced call, never run."""
        for state, entry in self._fenced.withdraw(states):
            state.running -= 1
            state.never_run.add(id(entry))
        self._idle.notify_all()

    # -- what the rest of the consumer reads ---------------------------------------------------

    def stragglers(self, partitions: Iterable[TP]) -> list[PartitionState]:
        """Removed states of these partitions whose calls still run: a hand-over of the
        partition waits for them too (an exactly-once redo replaced the state a mode knew, or
        a drain timed out).

        Caller: the modes' hand-backs. Affects: nothing.
        """
        with self._lock:
            return [s for tp in partitions for s in self._stragglers.get(tp, ())]

    def running(self, states: Iterable[PartitionState]) -> int:
        """How many entries of ``states`` a worker, a write or a backoff still holds.

        Caller: drains and hand-backs (modes, poll loop), any thread. Affects: nothing.
        """
        with self._lock:
            return sum(state.running for state in states)

    def progress(self, states: Iterable[PartitionState]) -> list[Progress]:
        """Each window's safe cursor, finished offsets above it and end, in one step: what a
        ``key_shared`` member's cursor writes are made of.

        Caller: a mode's cursor writer. Affects: nothing.
        """
        with self._lock:
            return [
                (s.tp, s.window.safe_cursor, s.window.finished_above_cursor(), s.window.seen_end)
                for s in states
                if s.window is not None
            ]

    def commit_snapshot(
        self,
        states: Iterable[PartitionState],
        take_outputs: bool = False,
    ) -> tuple[list[tuple[PartitionState, int, OffsetRuns]], list[tuple[PartitionState, Any]]]:
        """Each committable window's safe cursor and finished offsets above it, and (with
        ``take_outputs``) the exactly-once outputs of exactly the records seen finished, all
        in one step. A partition whose fetch went back is left out: its window is the old
        log's.

        Caller: the committers, on the poll thread. Affects: with ``take_outputs``, the
        partitions' ready outputs move to the caller.
        """
        taken: list[tuple[PartitionState, Any]] = []
        with self._lock:
            snapshot = [
                (s, s.window.safe_cursor, s.window.finished_above_cursor())
                for s in states
                if s.window is not None and s.rewound_to is None
            ]
            if take_outputs:
                for state, _cursor, _finished in snapshot:
                    if state.outputs.ready:
                        taken.append((state, state.outputs.take()))
        return snapshot, taken

    def return_outputs(self, taken: Iterable[tuple[PartitionState, Any]]) -> None:
        """Outputs taken by :meth:`commit_snapshot` that this commit does not carry go back
        to wait for a later one, ahead of any made ready since.

        Caller: the exactly-once committer, on the poll thread. Affects: the partitions'
        ready outputs.
        """
        with self._lock:
            for state, items in taken:
                state.outputs.give_back(items)

    def figures(self, state: PartitionState, now: float) -> WindowFigures:
        """The gauges of ``state``'s window in one step.

        Caller: the poll loop's sampler. Affects: nothing.
        """
        with self._lock:
            window = state.window
            blocked = len(state.blocked_keys()) + len(state.parked)
            if window is None:
                return WindowFigures(0, 0, 0, blocked, None, None)
            return WindowFigures(
                window.in_flight,
                window.waiting,
                window.busy_keys,
                blocked,
                window.safe_cursor,
                window.blocker(now),
            )

    def pressure(
        self, states: Mapping[TP, PartitionState], paused: set[TP]
    ) -> tuple[list[TP], list[TP]]:
        """Which partitions to pause and which of ``paused`` to resume, by two rules.

        A window full of unfinished records pauses its partition until it drains to its low
        watermark. Exactly-once outputs waiting for a commit (held while a DLQ topic is
        missing, the producer cannot be built or the metadata overflowed) are the other
        memory fetching grows: once the member holds ``max_held_output_bytes`` of them, every
        partition holding some pauses, and resumes once the total is under half of it and
        its window allows. :attr:`held_output_bytes` is the total seen.

        Caller: the poll loop's backpressure. Affects: nothing the caller does not do (it
        pauses), besides which partitions count as paused for held outputs.
        """
        pause: list[TP] = []
        resume: list[TP] = []
        budget = self._options.max_held_output_bytes
        held_by_outputs = self._held_by_outputs
        held_by_outputs &= paused  # resumed or forgotten by someone else (a redo, a rewind)
        with self._lock:
            total = sum(state.outputs.ready_bytes for state in states.values())
            over = total >= budget
            lifted = 2 * total < budget
            for tp, state in states.items():
                window = state.window
                holds = over and bool(state.outputs.ready)
                if tp in paused:
                    drained = window is not None and window.should_resume()  # clears its latch
                    if holds:
                        held_by_outputs.add(tp)
                    if tp in held_by_outputs:
                        if lifted:
                            held_by_outputs.discard(tp)
                            if window is None or not window.paused:
                                resume.append(tp)  # else the window rule resumes it
                    elif drained:
                        resume.append(tp)
                elif (window is not None and window.should_pause()) or holds:
                    pause.append(tp)
                    if holds:
                        held_by_outputs.add(tp)
        self.held_output_bytes = total
        if over and held_by_outputs and not self._outputs_over:
            self._outputs_over = True
            log.warning(
                "%d bytes of outputs wait for a commit (max_held_output_bytes %d): fetching "
                "paused for the %d partition(s) holding them until under half of it "
                "(keyshared_held_output_bytes)",
                total,
                budget,
                len(held_by_outputs),
            )
        elif self._outputs_over and not held_by_outputs:
            self._outputs_over = False
            log.info("%d bytes of outputs wait for a commit: fetching resumed", total)
        return pause, resume

    def observe_positions(self, positions: Iterable[tuple[PartitionState, int]]) -> None:
        """Let the windows' cursors pass offsets the consumer skipped without delivering them
        (transaction markers, compacted records).

        Caller: the poll loop. Affects: the windows' cursors.
        """
        with self._lock:
            for state, offset in positions:
                if state.window is None:
                    # Nothing delivered since the assignment: a position equal to the one at
                    # the assignment may still be the previous fetch's.
                    if (
                        state.committed is None
                        or offset <= state.committed
                        or offset == state.stale_position
                    ):
                        continue
                    state.window = self.new_window(state, state.committed)
                state.window.observe_position(offset)

    # -- rebalance and restarts ----------------------------------------------------------------

    def rewinding(self, state: PartitionState) -> None:
        """``state``'s fetch went back (a recreated topic, a truncated log): records of the old
        log waiting out a retry backoff will not run again.

        Caller: the poll loop's rewinds. Affects: ``state``'s running count and backoffs.
        """
        with self._lock:
            self._withdraw_retries(state)

    def restart(self, state: PartitionState) -> int | None:
        """Start ``state`` again with no window, once nothing of the old one runs; None (and
        nothing changed) while something does. Returns the old window's safe cursor: its
        lowest unfinished record (a withdrawn backoff, a block, what queued behind them),
        which must be read again if the new log still has it (a truncated log does).

        Caller: the poll loop's rewinds. Affects: ``state``'s window, blocks, backoffs and
        uncommitted outputs (dropped: else they went out later in a transaction for unrelated
        offsets of the new log, after the same keys' new outputs, or never).
        """
        with self._lock:
            self._withdraw_retries(state)
            if state.running:
                return None
            window = state.window
            cursor = window.safe_cursor if window is not None else state.committed
            state.window = None
            state.outputs.drop()
            state.never_run.clear()
            state.blocked.clear()
            state.blocked_unordered.clear()
            return cursor if cursor is not None else -1

    def stop_dispatching(self, states: list[PartitionState]) -> None:
        with self._lock:
            for state in states:
                if state.phase is PartitionPhase.ACTIVE:
                    state.phase = PartitionPhase.DRAINING
                self._withdraw_retries(state)
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
            with self._lock:
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
        running are reported to the fenced-keys hold, which keeps their keys from starting
        again here until they end."""
        states = list(states)
        fenced = self._fenced
        with self._lock:
            dropped = self._drop_held(states) if self._held else set()
            self._withdraw(states)
            for state in states:
                state.phase = PartitionPhase.GONE
                dropped |= self._withdraw_retries(state)
                if state.window is None:
                    continue
                drain = state.window.remove()
                if state.running > 0:
                    self._stragglers.setdefault(state.tp, []).append(state)
                    # In flight but not running: dropped from the held queue, blocked, or
                    # withdrawn from a backoff.
                    idle = dropped | state.never_run
                    idle |= {id(b.entry) for b in state.blocked.values()}
                    idle |= {id(b.entry) for b in state.blocked_unordered.values()}
                    fenced.fenced(state, [e for e in drain.in_flight if id(e) not in idle])
                    self._fencing = bool(fenced)
            self._idle.notify_all()


def _queue_released(
    state: PartitionState, released: list[Entry[Any]], ready: dict[int, list[Work]]
) -> None:
    """Group the records a settlement released by worker, for one dispatch per worker."""
    for nxt in released:
        works = ready.get(nxt.worker)
        if works is None:
            ready[nxt.worker] = [(state, nxt)]
        else:
            works.append((state, nxt))
