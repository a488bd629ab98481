"""``partition`` mode with the coordinator: the Kafka group assigns, a lease lets a partition run.

Without the coordinator a revoke whose drain times out hands the partition over anyway, and the
next owner may start a key's next record while the old owner still runs the previous one. Here a
partition that the group assigns stays paused in the consumer, and no record of it is admitted,
until this member holds the partition's lease (``partition-leases/<topic>@<p>-<seq>``). The
previous owner releases its lease only once nothing of the partition runs there any more:

- **revoke**: drain (bounded by ``drain_timeout``), final commit, then release. If the drain
  timed out, the lease is kept until the stragglers finish (checked every loop iteration), so
  the next owner waits for them instead of overlapping them.
- **lost** (``on_lost``: the group dropped this member, a zombie): results are discarded and
  nothing is committed; the lease is released once the partition's handlers have finished, or
  goes with the ZooKeeper session if the process dies or stalls past it. Releasing it at once
  would let the new owner overlap handlers that are still running here.
- **grant**: the committed offset is read *after* the grant (the previous owner committed before
  releasing), the consumer seeks there (records fetched before, and dropped, come again) and
  resumes, and only then does the poll loop get the partition (``events.assigned``).

Commits carry the lease: the cursor store refuses, before Kafka sees it, the commit of a
partition whose lease znode is gone (one ``get_children`` per commit), and counts it as fenced.
Records carry the lease's token (``Record`` fencing token) for downstream fencing.

Session handling is :class:`~keyshared.modes.session_gate.SessionGate`'s: suspended pauses
dispatch and commits; lost fences every partition (``events.lost``) and keeps them paused; a
renewed session queues for the leases of the partitions the group still assigns here.
Everything in this class runs on the poll thread (rebalance callbacks are served inside
``consume``); lease waits run on threads of their own that post the grant to the inbox. Every
way a lease ends here (revoke, lost, session expired, lease removed) is in one section of the
class, because letting go is where the mode's guarantee is kept or lost, and each way has to
keep it alike: a lease is released only once nothing of its partition runs here any more (the
hand-back waits for the stragglers and retries the release until ZooKeeper takes it).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition
from kazoo.exceptions import KazooException

from coordinator.errors import MemberIdInUse
from coordinator.leases import Lease, PendingLease
from coordinator.members import MemberInfo
from keyshared.core.types import TP
from keyshared.kafka.commits import Committer
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.kafka.seams import MembershipEvents, PlugContext
from keyshared.kafka.startup import assigns_incrementally
from keyshared.modes.coordinated_member import CoordinatedMember
from keyshared.modes.handback import gone
from keyshared.modes.lease_queue import wait_in_background
from keyshared.modes.leased_commits import LeasedCommits

if TYPE_CHECKING:
    from keyshared.modes.recipes import Recipes
    from keyshared.runtime.partition import PartitionState

__all__ = ["PartitionLeaseMember"]

log = logging.getLogger(__name__)

_REQUEUE_EVERY = 1.0  # seconds between retries of a lease that could not even be queued


class PartitionLeaseMember(CoordinatedMember):
    """The consumer's membership and cursor store in ``partition`` mode with a coordinator.

    Each partition's lease is one holding (:attr:`holdings`, named ``topic[p]``)::

        assigned ─queue─▶ WAITING ─granted, none of its own calls still run─▶ ACTIVE
                            │  (queued; or granted and waiting         (resumed, dispatching)
                            │   for this member's stragglers)            │          │
                            │                                          revoke     lost, lease
                            │ revoked/lost: withdrawn, or handed          │        gone, session
                            │ back if already granted                     ▼        expired, leaving
                            │ session expired: forgotten             DRAINING       │
                            ▼                                             │ drained │
                        (forgotten)              HANDING_BACK ◀───────────┴─────────┘
                                                      │ no call of the partition runs
                                                      ▼ (the hand-back releases it)
                                                   RELEASED

    Example::

        zk = ZooKeeperCoordinator("127.0.0.1:2181")
        KeySharedConsumer(config, ["orders"], handle, coordinator=zk).run()  # mode="partition"

    :param zk: the coordinator (started); its session is this member's for the run.
    :param context: the consumer run it plugs into.
    """

    _mode = "partition"

    def __init__(self, zk: Recipes, context: PlugContext) -> None:
        super().__init__(zk, context)
        self._options = context.options
        self._dispatcher = context.dispatcher
        self._leases = zk.partition_leases(context.group, context.member_id)
        self._directory = zk.layout(context.group).partition_leases
        self._incremental = assigns_incrementally(context.kafka_config)
        self._generation = 0  # assignments seen; stored in the lease for operators
        self._assigned: set[TP] = set()  # by the group: paused here until leased
        self._unqueued: set[TP] = set()  # assigned, but queueing for the lease failed
        self._next_requeue = 0.0
        self._pending: dict[TP, tuple[PendingLease, float]] = {}
        self._held: dict[TP, Lease] = {}  # granted and handed to the poll loop
        self._state: dict[TP, PartitionState] = {}  # the poll loop's state of each held one
        self._ready: dict[TP, Lease] = {}  # granted, waiting for this member's own stragglers
        self.commits = LeasedCommits(
            zk.client,
            self._directory,
            self._gate,
            self._held,
            lambda tp, lease: context.inbox.post(_call(self._leasegone, tp, lease)),
        )
        self._info = MemberInfo(context.member_id, mode="partition", topics=tuple(context.topics))

    # -- Membership (the life cycle is CoordinatedMember's) ------------------------------------

    def _prepare(
        self, consumer: KafkaConsumer, topics: list[str], events: MembershipEvents
    ) -> None:
        # A second live process with this id would share this one's plan: refused here.
        self._membership = self._zk.join(self._ctx.group, self._info)
        self.commits.bind(
            self._ctx.kafka_committer
            or Committer(
                consumer, self._ctx.metrics, self._dispatcher, lambda tp: events.states.get(tp)
            )
        )

    def _take_part(self, topics: list[str]) -> None:
        self._consumer.subscribe(
            topics,
            on_assign=lambda _c, parts: self._on_assign(parts),
            on_revoke=lambda _c, parts: self._on_revoke(_tps(parts)),
            on_lost=lambda _c, parts: self._on_lost(_tps(parts)),
        )
        log.info(
            "partition mode with leases: member %s of %s", self._ctx.member_id, self._ctx.group
        )

    def rewound(self, tp: tuple[str, int]) -> bool:
        """Kafka's committed offsets are the cursors: the poll loop starts the partition again
        where the fetch went back to (keyshared/kafka/rewinds.py)."""
        return False

    def _joined(self) -> bool:
        """A member once the Kafka group's first assignment arrived, unless the session wavers."""
        return self._generation > 0

    def _after_releases(self) -> None:
        """Start grants that waited for their stragglers (released just now); queue again for
        leases that could not even be queued."""
        for tp in [tp for tp in self._ready if not self._straggling(tp)]:
            self._start(tp, self._ready.pop(tp))
        if self._unqueued and time.monotonic() >= self._next_requeue:
            self._next_requeue = time.monotonic() + _REQUEUE_EVERY
            for tp in sorted(self._unqueued):
                self._queue_for(tp)

    def _give_everything_back(self) -> None:
        """After the final commit: release every lease whose partition is idle, then the
        session ends. Leases of partitions whose handlers still run (the shutdown drain timed
        out) are kept until those finish, on a thread of their own, or until the process ends
        and its session with it: the next owner never overlaps them."""
        self._cancel_pending()
        for tp, lease in self._held.items():
            self._let_go(tp, self._release_of(lease), self._states_of(tp))
        for tp, lease in self._ready.items():
            self._let_go(tp, self._release_of(lease))
        self._held.clear()
        self._ready.clear()

    # -- the group's rebalance callbacks (poll thread, inside consume) ----------------------------

    def _on_assign(self, partitions: list[TopicPartition]) -> None:
        """Take the partitions paused: nothing of them runs before the lease is granted."""
        self._generation += 1
        if self._incremental:
            self._consumer.incremental_assign(partitions)
        else:
            self._consumer.assign(partitions)
        if not partitions:
            return
        self._consumer.pause(partitions)
        for tp in _tps(partitions):
            self._assigned.add(tp)
            self._queue_for(tp)

    def _on_revoke(self, tps: list[TP]) -> None:
        """Drain and commit what runs, then release; keep the lease of stragglers."""
        if self._closing:
            return  # served by consumer.close() after leave(): nothing is held any more
        events = self._require_events()
        self._forget(tps)
        held = [tp for tp in tps if tp in self._held]
        if not held:
            return
        for tp in held:
            self.holdings.drain(tp_name(tp))
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
                self.holdings.withdraw(tp_name(tp))
            ready = self._ready.pop(tp, None)
            if ready is not None:
                self._let_go(tp, self._release_of(ready))
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
        self._let_go(tp, self._release_of(lease), states)

    def _let_go(
        self,
        tp: TP,
        release: Callable[[], None],
        states: list[PartitionState] | None = None,
        *,
        alive: bool = True,
    ) -> None:
        """Hand ``tp``'s holding over to the hand-back: released once nothing of it runs."""
        name = tp_name(tp)
        self._hand_back.add(name, release, states, alive=alive, holding=self.holdings.let_go(name))

    def _cancel_pending(self) -> None:
        """Withdraw every acquisition under way (cancelling deletes its znode)."""
        for tp, (pending, _) in self._pending.items():
            pending.cancel()
            self.holdings.withdraw(tp_name(tp))
        self._pending.clear()

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
        self._cancel_pending()
        for tp in self._ready:
            self.holdings.withdraw(tp_name(tp))  # granted, not started: went with the session
        self._ready.clear()
        held = list(self._held)
        if held:
            events.lost(held)
        self._hand_back.fence_all()
        for tp in list(self._state):
            self._let_go(tp, gone, self._states_of(tp), alive=False)
        for tp in held:
            self.holdings.let_go(tp_name(tp))  # never started a state: no straggler keeps it
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
        self._let_go(tp, gone, self._states_of(tp), alive=False)
        self._pause([tp])
        if tp in self._assigned:
            self._queue_for(tp)

    # -- leases -----------------------------------------------------------------------------------

    def _queue_for(self, tp: TP) -> None:
        self._unqueued.discard(tp)
        if tp_name(tp) in self.holdings:  # queued, granted or held already
            return
        if self._gate.lost or self._gate.suspended:
            self._unqueued.add(tp)  # a renewed or resumed session retries it
            return
        self.holdings.want(tp_name(tp))  # before the znode: no znode stands that nobody owns
        try:
            pending = self._leases.begin(tp[0], tp[1], generation=self._generation)
        except KazooException as exc:
            log.warning("%s[%d]: queueing for the lease failed (%s); retrying", tp[0], tp[1], exc)
            self.holdings.withdraw(tp_name(tp))
            self._unqueued.add(tp)
            return
        except BaseException:
            self.holdings.withdraw(tp_name(tp))
            raise
        self._pending[tp] = (pending, time.monotonic())
        self._gate.metrics.pending_drains(len(self._pending))
        log.info(
            "%s[%d]: assigned; waiting for its lease (token %d) before dispatching",
            tp[0],
            tp[1],
            pending.token,
        )
        wait_in_background(
            pending,
            self._ctx.inbox,
            f"{tp[0]}[{tp[1]}]",
            lambda lease: self._granted(tp, pending, lease),
            lambda: self._retry(tp, pending),
        )

    def _retry(self, tp: TP, pending: PendingLease) -> None:
        entry = self._pending.get(tp)
        if entry is not None and entry[0] is pending:
            del self._pending[tp]
            self.holdings.withdraw(tp_name(tp))
            if tp in self._assigned and not self._closing:
                self._unqueued.add(tp)

    def _granted(self, tp: TP, pending: PendingLease, lease: Lease) -> None:
        entry = self._pending.get(tp)
        if entry is None or entry[0] is not pending or self._closing or self._gate.lost:
            self._hand_back.add(tp_name(tp), self._release_of(lease))  # withdrawn meanwhile
            return
        del self._pending[tp]
        self._gate.metrics.pending_drains(len(self._pending))
        self._gate.metrics.handover_waited(time.monotonic() - entry[1])
        if self._straggling(tp):
            log.info("%s[%d]: lease granted; waiting for this member's own stragglers", *tp)
            self._ready[tp] = lease
            return
        self._start(tp, lease)

    def _start(self, tp: TP, lease: Lease) -> None:
        """From the committed offset, read now that the previous owner's commit is final."""
        events, committer = self._require_events(), self.commits.committer
        timeout = self._options.startup_timeout
        try:
            starts = committer.starting_points([tp], timeout)
        except KafkaException as exc:
            log.warning("%s[%d]: reading the committed offset failed (%s); retrying", *tp, exc)
            self._ready[tp] = lease
            return
        offset, metadata = starts.get(tp, (None, ""))
        where = offset if offset is not None else self._reset_position()
        self._held[tp] = lease
        self.commits.starts[tp] = (offset, metadata)
        try:  # seek raises while the fetcher has not started; assigned, on a key-state timeout
            self._consumer.seek(TopicPartition(tp[0], tp[1], where))
            self._consumer.resume([TopicPartition(tp[0], tp[1])])
            events.assigned([tp])
        except Exception as exc:  # retried from tick: a lease neither used nor released blocks
            log.warning("%s[%d]: starting failed (%r); retrying", *tp, exc)
            self._held.pop(tp)
            self._pause([tp])
            self._ready[tp] = lease
            return
        finally:
            self.commits.starts.pop(tp, None)
        self.holdings.grant(tp_name(tp))
        state = events.states.get(tp)
        if state is not None:
            self._state[tp] = state
            token = lease.token
            state.fencing = lambda _key, _offset: token
        log.info("%s[%d]: lease held (token %d), dispatching from %s", *tp, lease.token, offset)

    def _reset_position(self) -> int:
        reset = str(self._ctx.kafka_config.get("auto.offset.reset", "largest")).lower()
        return OFFSET_BEGINNING if reset in ("smallest", "earliest", "beginning") else OFFSET_END

    def _straggling(self, tp: TP) -> bool:
        return self._hand_back.busy(tp_name(tp))

    def _release_of(self, lease: Lease) -> Callable[[], None]:
        """The release of ``lease``, retried by the hand-back until ZooKeeper takes it."""
        return lambda: self._leases.release(lease)

    # -- the session ------------------------------------------------------------------------------

    def _renewed(self) -> None:
        """A new session: join again (stop if another process took the id meanwhile), and
        queue for every partition the group still assigns here."""
        if self._closing:
            return
        try:
            self._membership = self._zk.join(self._ctx.group, self._info)
        except MemberIdInUse:
            log.exception("rejoining after a lost session failed; stopping")
            self._ctx.request_stop()
            return
        for tp in sorted(self._unqueued):
            self._queue_for(tp)

    def _pause(self, tps: Iterable[TP]) -> None:
        parts = [TopicPartition(t, p) for t, p in tps]
        if parts:
            with contextlib.suppress(KafkaException):
                self._consumer.pause(parts)


def tp_name(tp: TP) -> str:
    return f"{tp[0]}[{tp[1]}]"


def _tps(partitions: list[TopicPartition]) -> list[TP]:
    return [(tp.topic, tp.partition) for tp in partitions]


def _call(fn: Callable[[TP, Lease], None], tp: TP, lease: Lease) -> Callable[[], None]:
    """``fn(tp, lease)`` later, bound to these values (not to a loop variable)."""
    return lambda: fn(tp, lease)
