"""When a ready record may not start yet: the dispatcher's pause, liveness check and hold.

A part of :class:`~keyshared.runtime.dispatcher.Dispatcher` (a base class of it), kept apart
because it is the one thing the coordinators steer and the rest of the dispatcher does not
need to know about:

- **pause** (the coordinator lost its ZooKeeper connection): start nothing; what becomes ready
  queues, in order, until dispatch resumes;
- **liveness** (no recent proof of the session): the same, decided per record;
- **hold** (``key_shared``, issue 24 defect 5): a record whose key still has a call running in
  a partition that was fenced waits for that call, alone; the other keys go on.

Everything here runs under the dispatcher's lock unless it takes it itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from keyshared.core.window import Entry
from keyshared.runtime.partition import PartitionState, Phase

if TYPE_CHECKING:
    from keyshared.runtime.control import DispatchHold

__all__ = ["DispatchGate"]

Work = tuple[PartitionState, Entry[Any]]


class DispatchGate:
    """The pause, the liveness check and the hold of the dispatcher (see the module)."""

    lock: threading.Lock
    _idle: threading.Condition
    _submit: Callable[[int, list[Work]], None]

    def __init__(self) -> None:
        self._held: list[tuple[int, list[Work]]] | None = None  # while dispatch is paused
        self._live: Callable[[], bool] | None = None  # a coordinator's "may I still run?"
        self._hold: DispatchHold | None = None  # keys waiting for their fenced calls

    def use_hold(self, hold: DispatchHold) -> None:
        """Let ``hold`` keep released records from starting (wired before the first record):
        every removed partition's running entries are reported to it, and every end of one."""
        self._hold = hold

    def _ended(self, state: PartitionState, entry: Entry[Any] | None) -> None:
        """An entry of a partition no longer active stopped running (lock held): start what
        waited for it."""
        hold = self._hold
        if hold is None or not hold or state.phase is not Phase.GONE:
            return
        for work in hold.ended(state, entry, state.running <= 0):
            self._dispatch(work[1].worker, [work])

    # -- pausing dispatch (the coordinator lost its connection) ----------------------------------

    def set_liveness(self, live: Callable[[], bool]) -> None:
        """Start nothing while ``live()`` is False (a coordinator that has not heard from its
        ZooKeeper session recently enough to be sure it still holds its work). What becomes
        ready meanwhile is held, in order, until :meth:`resume_dispatch`."""
        self._live = live

    def live(self) -> bool:
        live = self._live
        return live is None or live()

    def defer(self, state: PartitionState, entry: Entry[Any]) -> None:
        """A worker found the member not live as it was about to run ``entry``: hold it (still
        counted as running) until dispatch resumes."""
        with self.lock:
            if self._held is None:
                self._held = []
            self._held.append((entry.worker, [(state, entry)]))

    def _dispatch(self, worker: int, works: list[Work]) -> None:
        """Hand ready records to a worker, or hold them while dispatch is paused (lock held)."""
        hold = self._hold
        if hold is not None and hold:  # a fenced call of their key still runs: they wait
            works = hold.admit(works)
            if not works:
                return
        if self._held is None and self._live is not None and not self._live():
            self._held = []  # not sure of the session any more: whoever resumes dispatch clears it
        if self._held is not None:
            self._held.append((worker, works))
        else:
            self._submit(worker, works)

    def pause_dispatch(self) -> None:
        """Start nothing new; records keep being admitted and queue up in their keys' order.

        For a member that lost its ZooKeeper connection: it cannot know whether its session
        (and so its ranges) is still alive, so it starts no handler until it knows. Handlers
        already running finish as usual.
        """
        with self.lock:
            if self._held is None:
                self._held = []

    def resume_dispatch(self) -> None:
        """Hand over everything held while paused, in the order it became ready."""
        with self.lock:
            held, self._held = self._held, None
            for worker, works in held or ():
                self._submit(worker, works)

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
                    dropped.add(id(entry))
            if remaining:
                kept.append((worker, remaining))
        self._held = kept
        self._idle.notify_all()
        return dropped

    def _withdraw(self, states: list[PartitionState]) -> None:
        """Records of partitions that stop dispatching, waiting in the hold, never run."""
        hold = self._hold
        if hold is not None:
            for state, _entry in hold.withdraw(states):
                state.running -= 1
            self._idle.notify_all()
