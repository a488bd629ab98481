"""Every way a partition's lease ends here, and the one rule they share.

A part of :class:`~keyshared.modes.partition_leases.PartitionLeaseMember` (a base class of
it), kept apart because letting go is where the mode's guarantee is kept or lost, and each way
has to keep it alike: a lease is released only once nothing of its partition runs here any more
(the hand-back waits for the stragglers and retries the release until ZooKeeper takes it), so
the next owner never overlaps a handler still running here. The ways:

- the group **revokes** partitions: drain and final commit (``events.revoked``), then release;
- the group **loses** them (this member was dropped, a zombie): discard, commit nothing;
- either one while the lease is still awaited, or granted but held back for this member's own
  stragglers: stop waiting, or give that grant back;
- the ZooKeeper session **expires**: every lease is gone with it; discard, keep the partitions
  paused, and queue for them again once a new session is up;
- someone **removes** a lease this member holds: stop the partition and queue for it again.

The member itself (:mod:`keyshared.modes.partition_leases`) joins, takes partitions paused,
queues for and starts them. Everything here runs on the poll thread, on its fields (declared
below).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from coordinator.leases import Lease, PendingLease
from keyshared.kafka.seams import MembershipEvents
from keyshared.modes.handback import HandBack, gone
from keyshared.modes.session_gate import SessionGate
from keyshared.runtime.control import DispatchControl

if TYPE_CHECKING:
    from keyshared.runtime.partition import PartitionState

__all__ = ["TP", "PartitionReleases", "tp_name"]

log = logging.getLogger("keyshared.modes.partition_leases")  # the member's log, as before

TP = tuple[str, int]


class PartitionReleases:
    """How the member lets partitions and their leases go (see the module)."""

    # The member's fields (PartitionLeaseMember.__init__ sets them).
    _dispatcher: DispatchControl
    _gate: SessionGate
    _hand_back: HandBack
    _closing: bool
    _assigned: set[TP]  # by the group: paused here until leased
    _unqueued: set[TP]  # assigned, but queueing for the lease failed
    _pending: dict[TP, tuple[PendingLease, float]]
    _held: dict[TP, Lease]  # granted and handed to the poll loop
    _state: dict[TP, PartitionState]  # the poll loop's state of each held one
    _ready: dict[TP, Lease]  # granted, waiting for this member's own stragglers

    if TYPE_CHECKING:  # and its methods

        def _require_events(self) -> MembershipEvents: ...

        def _release_of(self, lease: Lease) -> Callable[[], None]: ...

        def _queue_for(self, tp: TP) -> None: ...

        def _pause(self, tps: Iterable[TP]) -> None: ...

    # -- the group takes partitions away (rebalance callbacks: poll thread, inside consume) -------

    def _on_revoke(self, tps: list[TP]) -> None:
        """Drain and commit what runs, then release; keep the lease of stragglers."""
        if self._closing:
            return  # served by consumer.close() after leave(): nothing is held any more
        events = self._require_events()
        self._forget(tps)
        held = [tp for tp in tps if tp in self._held]
        if not held:
            return
        events.revoked(held)
        for tp in held:
            self._give_back(tp)

    def _on_lost(self, tps: list[TP]) -> None:
        """Taken away without a revoke: discard, commit nothing, release once nothing runs."""
        if self._closing:
            return
        events = self._require_events()
        self._forget(tps)
        held = [tp for tp in tps if tp in self._held]
        if held:
            events.lost(held)
        for tp in held:
            self._give_back(tp)

    def _forget(self, tps: list[TP]) -> None:
        """The group took these away: stop waiting for their leases."""
        for tp in tps:
            self._assigned.discard(tp)
            self._unqueued.discard(tp)
            pending = self._pending.pop(tp, None)
            if pending is not None:
                pending[0].cancel()
            ready = self._ready.pop(tp, None)
            if ready is not None:
                self._hand_back.add(tp_name(tp), self._release_of(ready))
        self._gate.metrics.pending_drains(len(self._pending))

    def _give_back(self, tp: TP) -> None:
        """Release the lease of a partition the poll loop let go, once nothing of it runs."""
        lease = self._held.pop(tp)
        states = self._states_of(tp)
        running = self._dispatcher.running(states)
        if running:
            log.warning(
                "%s: %d handler(s) still running after the drain; the lease is kept until "
                "they finish, so the next owner cannot overlap them",
                tp_name(tp),
                running,
            )
        self._hand_back.add(tp_name(tp), self._release_of(lease), states)

    def _states_of(self, tp: TP) -> list[PartitionState]:
        """Every state of ``tp`` whose calls a hand-back waits for: the one granted (forgotten
        here) and the dispatcher's stragglers of the partition, which include states an
        exactly-once redo replaced since the grant."""
        state = self._state.pop(tp, None)
        stragglers = self._dispatcher.stragglers([tp])
        return [state, *stragglers] if state is not None and state not in stragglers else stragglers

    # -- ZooKeeper takes leases away --------------------------------------------------------------

    def _fence(self) -> None:
        """The session expired: every lease is gone. Discard everything, commit nothing."""
        events = self._require_events()
        for pending, _ in self._pending.values():
            pending.cancel()
        self._pending.clear()
        self._ready.clear()
        held = list(self._held)
        if held:
            events.lost(held)
        self._hand_back.fence_all()
        for tp in list(self._state):
            self._hand_back.add(tp_name(tp), gone, self._states_of(tp), alive=False)
        self._held.clear()
        self._state.clear()
        self._pause(self._assigned)
        self._unqueued |= self._assigned

    def _leasegone(self, tp: TP, lease: Lease) -> None:
        """Someone removed a lease this member held: stop the partition, queue for it again."""
        if self._held.get(tp) is not lease:
            return
        self._require_events().lost([tp])
        self._held.pop(tp)
        self._hand_back.add(tp_name(tp), gone, self._states_of(tp), alive=False)
        self._pause([tp])
        if tp in self._assigned:
            self._queue_for(tp)


def tp_name(tp: TP) -> str:
    return f"{tp[0]}[{tp[1]}]"
