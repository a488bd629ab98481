"""The seams of the consumer: what the poll loop and the dispatcher need from the outside.

Partition mode fills each with the Kafka group's own parts; the ZooKeeper coordinator plugs
its own in without the poll loop knowing which it talks to:

========================  =====================================  =============================
seam                      partition mode (today)                 with the coordinator
========================  =====================================  =============================
:class:`GroupMembership`  the Kafka group's rebalance callbacks  ZooKeeper members and ranges
:class:`Ownership`        the static key filters                 "is this key's slot mine?"
:class:`CursorStore`      Kafka offset commits                   commits fenced by a lease
:class:`DispatchControl`  the committers' snapshots              named holds, drain, stragglers
:class:`PollInbox`        (unused)                               kazoo's thread asks the poll
                                                                 thread to pause, drain, commit
========================  =====================================  =============================

``Ownership`` and ``DispatchControl`` live in :mod:`keyshared.runtime.control`, beside the
dispatcher they steer. Where handlers run (threads, asyncio, batch pools, pull) is
:mod:`keyshared.runtime.runners`.

Each protocol says which thread calls it. The poll thread is the only one that touches the
Kafka consumer, so everything that another thread wants done with it goes through the inbox.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from keyshared.core.health import Role
from keyshared.core.holding import HoldingView
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.runtime.control import DispatchControl, Ownership

if TYPE_CHECKING:
    from keyshared.kafka.commits import Committer
    from keyshared.metrics import ConsumerMetrics
    from keyshared.runtime.partition import PartitionState
    from keyshared.settings import ConsumerOptions

__all__ = [
    "CursorStore",
    "GroupMembership",
    "MembershipEvents",
    "Plug",
    "PlugContext",
    "PollInbox",
]

log = logging.getLogger(__name__)


class CursorStore(Protocol):
    """Where safe cursors come from and go. Called on the poll thread only.

    ``starting_points`` is read when partitions are assigned: per partition the offset to
    resume at (None: none stored) and the metadata stored with it. ``commit_sync`` is the last
    word before a partition (or a range) changes hands: True only when the cursor is durably
    stored. A store that fences (the coordinator) refuses a stale owner's write here, before it
    reaches Kafka.
    """

    def starting_points(
        self, partitions: list[tuple[str, int]], timeout: float
    ) -> dict[tuple[str, int], tuple[int | None, str]]: ...

    def commit_async(self, states: Iterable[PartitionState]) -> None: ...

    def commit_sync(self, states: Iterable[PartitionState]) -> bool: ...

    def leaving(self, partitions: list[tuple[str, int]]) -> None:
        """These partitions are being revoked: nothing of theirs is to be started again here
        (a pending exactly-once redo of one is dropped). Called before their final commit."""


class MembershipEvents(Protocol):
    """What the poll loop does when ownership changes; membership calls these on the poll
    thread (from rebalance callbacks, or from the inbox for the coordinator). ``states`` is
    the live state of each assigned partition (read it on the poll thread only)."""

    states: dict[tuple[str, int], PartitionState]

    def assigned(self, partitions: list[tuple[str, int]]) -> None: ...

    def revoked(self, partitions: list[tuple[str, int]]) -> bool:
        """Drain and commit; True when everything in flight finished within the timeout."""
        ...

    def lost(self, partitions: list[tuple[str, int]]) -> None: ...


class GroupMembership(Protocol):
    """Who owns what. Every method is called on the poll thread: ``join`` once before the
    first poll, ``tick`` once per loop iteration, ``leave`` once after the final commit —
    except ``role``, which the health endpoint reads from its own thread (flags only)."""

    def join(
        self, consumer: KafkaConsumer, topics: list[str], events: MembershipEvents
    ) -> None: ...

    def tick(self) -> None: ...

    def leave(self) -> None: ...

    def rewound(self, tp: tuple[str, int]) -> bool:
        """The fetch of ``tp`` went back below what was read (a recreated topic, a truncated
        log: keyshared/kafka/rewinds.py). True when the membership reads the partition again
        itself (records delivered meanwhile are dropped); False: the poll loop starts it again
        where the fetch went back to."""
        ...

    def role(self) -> Role:
        """Where the member stands, for ``/readyz`` (joining, member, standby, fenced...)."""
        ...

    def holding_views(self) -> tuple[HoldingView, ...]:
        """What the member wants, holds or hands back (leases, ranges, the exclusive lock), each
        with its phase, for ``/readyz`` and ``keyshared status``; read from the endpoint's
        thread (a published copy). Empty without a coordinator."""
        ...


class PollInbox:
    """Requests from other threads, run by the poll thread between polls.

    kazoo calls its watchers on its own thread, and the Kafka consumer must only be used on
    the poll thread; the coordinator therefore posts "pause this", "drain that range",
    "commit now" here instead of acting itself. ``post`` never blocks.

    Example::

        inbox = PollInbox()
        inbox.post(lambda: print("runs on the poll thread"))
        inbox.run_pending()   # the poll loop calls this every iteration
    """

    def __init__(self) -> None:
        self._requests: deque[Callable[[], None]] = deque()
        self._wake = threading.Event()

    def post(self, request: Callable[[], None]) -> None:
        self._requests.append(request)
        self._wake.set()

    def __len__(self) -> int:
        return len(self._requests)

    def run_pending(self) -> int:
        """Run every request posted so far; a failing request is logged, the rest still run."""
        ran = 0
        self._wake.clear()
        while self._requests:
            request = self._requests.popleft()
            ran += 1
            try:
                request()
            except Exception:
                log.exception("a request to the poll thread failed")
        return ran


@dataclass
class PlugContext:
    """What a coordinator gets to plug itself into one consumer run."""

    group: str
    member_id: str
    topics: list[str]
    options: ConsumerOptions
    dispatcher: DispatchControl
    inbox: PollInbox
    metrics: ConsumerMetrics
    request_stop: Callable[[], None]  # ends the run (e.g. after a fatal coordinator error)
    kafka_config: dict[str, Any]  # the consumer's librdkafka config (reset policy, security)
    # Exactly-once: the transactional committer that must do the Kafka commits behind the
    # coordinator's fence (None: build a plain Committer).
    kafka_committer: Committer | None = None


@dataclass
class Plug:
    """The seams a coordinator fills for one consumer run; None keeps the partition-mode part."""

    membership: GroupMembership | None = None
    ownership: Ownership | None = None
    cursor_store: CursorStore | None = None
