"""A ``key_shared`` member's lease queue (``keyshared.modes.lease_queue``): every acquisition
that breaks ends either granted or queued again, never pending for good.

Broker-less: the range leases are fakes whose acquisitions end as the test says, and the poll
thread is the test itself running the inbox. Each waiter runs on a thread of its own; the test
joins it before it looks at the inbox, so nothing here waits on time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kazoo.exceptions import ConnectionLoss

from coordinator.errors import Fenced
from coordinator.leases import Lease
from keyshared.core.holding import Phase
from keyshared.core.slots import SlotRange
from keyshared.kafka.seams import PollInbox
from keyshared.metrics import CoordinatorMetrics
from keyshared.modes.holdings import Holdings
from keyshared.modes.lease_queue import LeaseQueue

SLOTS = SlotRange(0, 99)
Outcome = Callable[[], Lease]


class _Pending:
    def __init__(self, token: int, outcome: Outcome) -> None:
        self.token = token
        self._outcome = outcome
        self.cancelled = False

    def wait(self) -> Lease:
        return self._outcome()

    def cancel(self) -> None:
        self.cancelled = True


class _Leases:
    """``begin`` hands out one acquisition per outcome, in order; an exception in the list is
    raised by ``begin`` itself (ZooKeeper away while queueing)."""

    def __init__(self, outcomes: list[Outcome | Exception]) -> None:
        self._outcomes = outcomes
        self.begun: list[_Pending] = []
        self.calls = 0

    def begin(self, slots: SlotRange, *, generation: int) -> _Pending:
        self.calls += 1
        outcome = self._outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        pending = _Pending(len(self.begun), outcome)
        self.begun.append(pending)
        return pending


def _lease(token: int) -> Lease:
    return Lease(str(SLOTS), f"/leases/{SLOTS}-{token:010d}", "A", 1, token)


def _fenced() -> Lease:
    raise Fenced(f"/leases/{SLOTS}-0000000000", f"acquire lease {SLOTS} (znode gone)")


def _broken() -> Lease:
    raise RuntimeError("the wait broke")


class _Member:
    def __init__(self, outcomes: list[Outcome | Exception]) -> None:
        self.leases = _Leases(outcomes)
        self.inbox = PollInbox()
        self.holdings = Holdings()
        # Threads of earlier tests (a lease keeper whose ZooKeeper is gone loops for good) are
        # not this member's waiters: settle joins only the waiters started after this point.
        self._earlier = set(threading.enumerate())
        self.granted: list[tuple[SlotRange, Lease]] = []
        self.queue = LeaseQueue(
            self.leases,  # type: ignore[arg-type]
            self.inbox,
            CoordinatorMetrics("g", "A"),
            lambda slots, lease: self.granted.append((slots, lease)),
            lambda slots, lease: None,
            self.holdings,
        )

    def settle(self) -> None:
        """Join every waiter, then run what they posted, as the poll thread would."""
        for thread in threading.enumerate():
            if thread.name == f"keyshared-lease-{SLOTS}" and thread not in self._earlier:
                thread.join()
        self.inbox.run_pending()


def test_a_waiter_fenced_while_the_session_lives_queues_again_and_is_granted() -> None:
    # The queued znode went (deleted by someone) while the session lived: no session loss
    # will withdraw the acquisition, so the queue itself must queue again.
    member = _Member([_fenced, lambda: _lease(7)])
    member.queue.queue(SLOTS, generation=1)
    member.settle()
    assert member.leases.calls == 2, "the fenced acquisition was never queued again"
    member.settle()
    assert member.granted == [(SLOTS, _lease(7))]
    assert SLOTS not in member.queue
    assert member.holdings.phase(str(SLOTS)) is Phase.WAITING  # the member grants it


def test_a_requeue_whose_begin_raises_is_retried_without_a_new_plan() -> None:
    member = _Member([_broken, ConnectionLoss(), lambda: _lease(9)])
    member.queue.queue(SLOTS, generation=1)
    member.settle()  # the wait broke; queueing again hits ZooKeeper's absence
    assert member.leases.calls == 2
    assert SLOTS not in member.queue
    assert str(SLOTS) not in member.holdings  # withdrawn: nothing of ours stands
    assert member.queue.unqueued, "nothing tells the member to queue for the range again"
    # The member's tick queues for what the plan in force gives it (the same plan).
    assert member.queue.queue_missing((SLOTS,), held=(), generation=1)
    assert not member.queue.unqueued
    member.settle()
    assert member.granted == [(SLOTS, _lease(9))]


def test_a_queueing_whose_begin_raises_leaves_nothing_wanted() -> None:
    member = _Member([ConnectionLoss()])
    assert not member.queue.queue_missing((SLOTS,), held=(), generation=1)
    assert SLOTS not in member.queue
    assert str(SLOTS) not in member.holdings


def test_the_range_is_wanted_before_its_znode_is_made() -> None:
    # A znode made before the holding exists would be one nobody owns if `want` then raised.
    member = _Member([])
    seen: list[Phase | None] = []

    def begin(slots: SlotRange, *, generation: int) -> _Pending:
        seen.append(member.holdings.phase(str(slots)))
        return _Pending(0, lambda: _lease(1))

    member.leases.begin = begin  # type: ignore[method-assign]
    member.queue.queue(SLOTS, generation=1)
    assert seen == [Phase.WAITING]
    member.settle()
