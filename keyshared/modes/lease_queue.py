"""Lease acquisitions waited on threads of their own, their grants delivered to the poll thread.

A lease may take as long as the previous owner's drain; the poll thread cannot wait that long
(it serves commits, metrics and shutdown), so each acquisition waits on a thread and the grant
is posted to the poll inbox. Everything else here runs on the poll thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Container

from coordinator.errors import AcquireCancelled, Fenced
from coordinator.leases import Lease, PendingLease, RangeLeases
from keyshared.core.slots import SlotRange
from keyshared.kafka.seams import PollInbox
from keyshared.metrics import CoordinatorMetrics
from keyshared.modes.holdings import Holdings

__all__ = ["LeaseQueue", "wait_in_background"]

log = logging.getLogger(__name__)

Granted = Callable[[SlotRange, Lease], None]


def wait_in_background(
    pending: PendingLease,
    inbox: PollInbox,
    what: str,
    granted: Callable[[Lease], None],
    failed: Callable[[], None],
) -> None:
    """Wait for ``pending`` on a thread of its own; post ``granted(lease)`` to the poll thread,
    or ``failed()`` if the wait broke. Only a withdrawal (:meth:`PendingLease.cancel`) posts
    nothing: its owner has forgotten the acquisition already. A fenced wait (the queued znode
    gone) posts ``failed`` too, since the znode may go while the session lives (deleted by
    hand): nobody else would queue again. After a session loss ``failed`` finds the
    acquisition withdrawn by the session gate, or withdraws it first; either way the owner
    checks that it is still the acquisition in force."""

    def wait() -> None:
        try:
            lease = pending.wait()
        except AcquireCancelled:
            return
        except Fenced as exc:
            log.warning("waiting for the lease of %s: %s; queueing again", what, exc)
            inbox.post(failed)
            return
        except Exception:
            log.exception("waiting for the lease of %s failed", what)
            inbox.post(failed)
            return
        inbox.post(lambda: granted(lease))

    threading.Thread(target=wait, name=f"keyshared-lease-{what}", daemon=True).start()


class LeaseQueue:
    """The acquisitions a member has under way, one per range.

    :param leases: the member's range leases.
    :param inbox: where grants are delivered (the poll thread runs them).
    :param metrics: pending drains and hand-over waits are reported here.
    :param on_granted: called on the poll thread with each lease that is still wanted.
    :param give_back: releases a lease granted after it was withdrawn (with retry).
    :param holdings: the member's holdings: each range queued for is WAITING there until it
        is granted (the member takes it on) or withdrawn.
    """

    def __init__(
        self,
        leases: RangeLeases,
        inbox: PollInbox,
        metrics: CoordinatorMetrics,
        on_granted: Granted,
        give_back: Granted,
        holdings: Holdings,
    ) -> None:
        self._holdings = holdings
        self._give_back = give_back
        self._leases = leases
        self._inbox = inbox
        self._metrics = metrics
        self._on_granted = on_granted
        self._pending: dict[SlotRange, PendingLease] = {}
        self.unqueued = False  # an acquisition broke and queueing again failed: see queue_missing

    def __contains__(self, slots: object) -> bool:
        return slots in self._pending

    def __len__(self) -> int:
        """Acquisitions still waiting for their lease."""
        return len(self._pending)

    def queue(self, slots: SlotRange, generation: int) -> None:
        """Queue for ``slots`` (behind every overlapping lease of another session). The range
        is wanted before its znode is made, so that no znode stands that no holding owns; if
        the znode cannot be made, the range is withdrawn again and the error raised."""
        self._holdings.want(str(slots))
        try:
            pending = self._leases.begin(slots, generation=generation)
        except BaseException:
            self._holdings.withdraw(str(slots))
            raise
        self._pending[slots] = pending
        self._metrics.pending_drains(len(self._pending))
        queued_at = time.monotonic()
        log.info("range %s: lease queued (token %d)", slots, pending.token)
        wait_in_background(
            pending,
            self._inbox,
            str(slots),
            lambda lease: self._granted(slots, pending, lease, time.monotonic() - queued_at),
            lambda: self._again(slots, pending, generation),
        )

    def queue_missing(
        self, wanted: tuple[SlotRange, ...], held: Container[SlotRange], generation: int
    ) -> bool:
        """Queue for every ``wanted`` range neither ``held`` nor queued. False when a queueing
        failed (ZooKeeper away): the caller tries again later. The owner calls it again while
        :attr:`unqueued` is set, too."""
        self.unqueued = False
        queued = True
        for slots in wanted:
            if slots not in held and slots not in self._pending:
                try:
                    self.queue(slots, generation)
                except Exception as exc:
                    log.warning("range %s: queueing failed (%r); retrying", slots, exc)
                    queued = False
        return queued

    def keep_only(self, wanted: tuple[SlotRange, ...]) -> None:
        """Withdraw every acquisition of a range no longer wanted."""
        for slots in [s for s in self._pending if s not in wanted]:
            self._pending.pop(slots).cancel()
            self._holdings.withdraw(str(slots))
        self._metrics.pending_drains(len(self._pending))

    def cancel_all(self) -> None:
        for slots, pending in self._pending.items():
            pending.cancel()
            self._holdings.withdraw(str(slots))
        self._pending.clear()
        self._metrics.pending_drains(0)

    def _again(self, slots: SlotRange, pending: PendingLease, generation: int) -> None:
        """The wait for ``pending`` broke: queue again at once. If that fails too (ZooKeeper
        away), :attr:`unqueued` tells the owner to queue for what it wants from its tick;
        waiting for the next plan could leave the range read by nobody for good."""
        if self._pending.get(slots) is not pending:
            return  # withdrawn meanwhile (a new plan, a session loss, stopping)
        del self._pending[slots]
        self._holdings.withdraw(str(slots))
        self._metrics.pending_drains(len(self._pending))
        try:
            self.queue(slots, generation)
        except Exception as exc:
            log.warning("range %s: queueing again failed (%r); retrying", slots, exc)
            self.unqueued = True

    def _granted(
        self, slots: SlotRange, pending: PendingLease, lease: Lease, waited: float
    ) -> None:
        if self._pending.get(slots) is not pending:
            self._give_back(slots, lease)  # withdrawn meanwhile
            return
        del self._pending[slots]
        self._metrics.pending_drains(len(self._pending))
        self._metrics.handover_waited(waited)
        self._on_granted(slots, lease)
