"""``key_shared`` mode in the consumer: slot ranges from ZooKeeper, drains, fenced cursors.

Every member reads every partition of its topics (manual assignment, no Kafka group) and runs
only the records whose slot lies in a range it holds the lease of; the rest count as done for
its own window. This class is the consumer's membership, ownership and cursor store at once,
because the three change together: a new lease changes what is owned, where reading starts
and which cursors are written. Everything here runs on the poll thread; kazoo's threads only
post requests to the poll inbox.

A change of assignment is applied like an eager rebalance, per member:

1. **Loss** of a range: the member drains every partition, writes each held range's cursor
   (one ZooKeeper transaction for all of them, fenced by each range's lease), then releases
   the lost range's lease, which is what the next owner is waiting for. The drain waits for
   every running record, even past ``drain_timeout`` (:mod:`keyshared.modes.deferred_rebuild`):
   no member, this one included, ever runs two records of a key at once.
2. **Gain**: the lease is queued on a thread of its own (it waits for the old owner's drain);
   when it is granted the member drains and re-assigns its partitions from the lowest cursor
   of its ranges, counting as done every record a cursor already covers
   (:class:`keyshared.core.claims.PartitionClaims`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, TopicPartition

from coordinator.assignment import AssignmentChange, AssignmentWatch
from coordinator.leader import AssignmentLeader
from coordinator.leases import Lease
from coordinator.members import MemberInfo
from keyshared.core.admission import Admission
from keyshared.core.claims import PartitionClaims
from keyshared.core.holding import Holding
from keyshared.core.slots import SlotRange
from keyshared.core.types import TP
from keyshared.errors import KeySharedError
from keyshared.kafka.kafka_consumer import NOT_JOINED, KafkaConsumer
from keyshared.kafka.seams import MembershipEvents, PlugContext
from keyshared.modes.claims_reader import ClaimsReader
from keyshared.modes.coordinated_member import CoordinatedMember
from keyshared.modes.deferred_rebuild import DeferredRebuild
from keyshared.modes.held_ranges import HeldRanges
from keyshared.modes.kafka_liveness import KafkaLiveness, PlanWithdrawal
from keyshared.modes.lease_queue import LeaseQueue
from keyshared.modes.range_cursors import partitions_of, token_lookup
from keyshared.modes.topic_watch import TopicWatch
from keyshared.modes.watermark_pass import LowWatermarkPass
from keyshared.runtime.control import Accepts

if TYPE_CHECKING:
    from keyshared.modes.recipes import Recipes
    from keyshared.runtime.partition import PartitionState

__all__ = ["KeySharedMember"]

log = logging.getLogger(__name__)

_ASSIGN_RETRY_S = 0.5
_REGAIN_COALESCE_S = 0.5  # grants arriving within this of the first are read together


class KeySharedMember(CoordinatedMember):
    """The consumer's side of ``key_shared`` mode (see the module docstring).

    Each slot range's lease is one holding (:attr:`holdings`, named ``lo-hi``)::

        planned here ─queue─▶ WAITING ─granted, cursor writer made─▶ ACTIVE (read after the
                                │ (queued; LeaseQueue)                 │  next rebuild)
                                │                                      │ planned away: the rebuild
                                │ planned away, session expired,       ▼ drains every partition
                                │ stopping: withdrawn                DRAINING
                                │ granted once no longer wanted,       │ drained (or timed out)
                                │ or its writer failed: handed back    ▼
                                ▼                                 HANDING_BACK ◀── leaving
                            (forgotten)                               │ last cursors written,
                                                                      ▼ no call of it runs
                                                                  RELEASED

    A lease found gone (a fenced cursor write) or lost with the session leaves ACTIVE for
    good with nothing to release; a range found fenced is queued for again.

    :param zk: the coordinator (started); its session is this member's for the run.
    :param context: the consumer run it plugs into.
    """

    _mode = "key_shared"

    def __init__(self, zk: Recipes, context: PlugContext) -> None:
        super().__init__(zk, context)
        self._options = context.options
        self._group = context.group
        self._me = context.member_id
        self._dispatcher = context.dispatcher
        self._admission = Admission(self._options.key_filters, self._options.null_keys_ordered)
        self._leases = zk.range_leases(self._group, self._me)
        self._assigned: list[TP] = []
        self._claims: dict[TP, PartitionClaims] = {}
        self._desired: tuple[SlotRange, ...] = ()
        self._generation = 0
        self._held = HeldRanges(
            self._leases,
            lambda lease: zk.cursor_writer(self._group, lease),
            self._gate.metrics.fenced,
            self._hand_back,
            holdings=self.holdings,
        )
        self._states: list[PartitionState] = []  # of the current assignment: a lease waits for them
        self._assign_retry_at: float | None = None
        self._regain_at: float | None = None  # granted ranges wait until then to be read
        self._deferred = DeferredRebuild(self._dispatcher, self._options.drain_timeout, self._me)
        self._flushed = True  # did every cursor write since the last drain go through?
        self._queue = LeaseQueue(
            self._leases,
            context.inbox,
            self._gate.metrics,
            self._granted,
            self._give_back,
            self.holdings,
        )
        self._topics = TopicWatch.of(zk.client, zk.layout(self._group), context)
        self._watermark = LowWatermarkPass(
            self._topics, zk.client, zk.layout(self._group), context.kafka_config
        )
        self._reader = ClaimsReader(zk, self._group, self._topics, context.kafka_config, self._me)
        self._leader: AssignmentLeader | None = None
        self._watch: AssignmentWatch | None = None
        self._kafka = KafkaLiveness(context.kafka_config, context.topics)
        self._withdrawal = PlanWithdrawal(self._kafka, self._me, self._group)
        self._missing = False  # a wanted range could not be queued for: retried from tick
        self._rereading = False  # a fetch went back: a re-read is on its way

    # -- Membership (the life cycle is CoordinatedMember's) ------------------------------------

    def _prepare(
        self, consumer: KafkaConsumer, topics: list[str], events: MembershipEvents
    ) -> None:
        partitions_of(consumer, topics, self._options.startup_timeout)  # a missing topic: error
        self._topics.describe()

    def _take_part(self, topics: list[str]) -> None:
        self._kafka.start()
        self._join()
        self._watch = self._zk.watch_assignment(
            self._group, self._me, lambda change: self._ctx.inbox.post(lambda: self._on(change))
        )
        self._leader = self._zk.leader(self._group, self._me)
        self._leader.start()
        log.info(
            "key_shared member %s of %s joined: %d partition(s) of %s",
            self._me,
            self._group,
            len(self._topics.partitions()),
            ", ".join(topics),
        )

    def _before_releases(self) -> None:
        """Leave the plan while Kafka is silent (a retry then waits for Kafka: each would hold
        this thread in its timeouts); retry a failed assignment, or a re-read that waited for
        running records (it may give ranges up)."""
        self._check_kafka()
        retry_at = self._assign_retry_at
        due = retry_at is not None and time.monotonic() >= retry_at
        if due and not self._gate.lost and self._kafka.answering():
            self._assign_from_cursors()
        regain_at = self._regain_at
        due = regain_at is not None and time.monotonic() >= regain_at
        if (due or self._deferred.ready()) and not self._gate.lost:
            self._rebuild(drop=[])

    def _after_releases(self) -> None:
        """Queue again for wanted ranges not queued for; read every partition again once the
        topics changed."""
        retry = self._missing or self._queue.unqueued or self._held.fenced_waiting()
        if retry and not self._deferred.waiting:
            self._queue_again()
        if self._topics.changed() and not self._gate.lost and not self._closing:
            self._rebuild(drop=[])  # partitions added, or the topic recreated: read them all

    def rewound(self, tp: TP) -> bool:
        """The fetch went back (keyshared/kafka/rewinds.py): the claims describe the old log.
        The topics are described again (a recreated one has a new id), then read again from
        the cursors; what arrives until then is dropped (the re-read seeks)."""
        if not self._rereading:
            self._rereading = True
            self._ctx.inbox.post(self._reread)
        return True

    def _reread(self, describe: bool = True) -> None:
        if describe:  # mid-recreate it fails: TopicWatch.changed looks again
            with contextlib.suppress(KeySharedError):
                self._topics.describe()
        if not self._gate.lost and not self._closing:
            self._rebuild(drop=[])  # drains first: no record runs twice at once in this member

    def _joined(self) -> bool:
        """A member once the leader's first plan was applied (slot ranges or none)."""
        return self._generation > 0

    def _give_everything_back(self) -> None:
        """After the final commit: give every range up (the session then ends)."""
        # Final cursors written: bring the group's Kafka offsets up to every range's cursor,
        # so lag tools see the end even with no leader left. Every member does it, even one
        # holding nothing now: the last to leave sees every other member's final cursors.
        self._watermark.final(run=self._consumer is not NOT_JOINED and self._gate.connected())
        self._queue.cancel_all()
        self._held.release_all(self._states)  # each lease stands while a call of its keys runs

    def _session_stopped(self) -> None:
        self._kafka.stop()

    # -- Ownership ------------------------------------------------------------------------------

    def admission(self, state: PartitionState) -> Accepts | None:
        return self._admission.of(self._claims.get(state.tp))

    # -- CursorStore ----------------------------------------------------------------------------

    def starting_points(
        self, partitions: list[TP], timeout: float
    ) -> dict[TP, tuple[int | None, str]]:
        return {tp: (self._claims[tp].start, "") for tp in partitions if tp in self._claims}

    def leaving(self, partitions: list[TP]) -> None:
        """Nothing to drop: ranges hand over through their own drains."""

    def commit_async(self, states: Iterable[PartitionState]) -> None:
        self._flush(list(states), force=False)
        # Kafka's offsets up to the ranges' cursors (lag tools), superseded cursors collected:
        # on a thread of its own, the poll thread never waits for Kafka there.
        if self._leader is not None and self._leader.is_leader and self._kafka.answering():
            self._watermark.due()

    def commit_sync(self, states: Iterable[PartitionState]) -> bool:
        return self._flush(list(states), force=True)

    def _flush(self, states: list[PartitionState], force: bool) -> bool:
        """Write each held range's cursor in every partition: one transaction for all of them,
        fenced by each range's lease."""
        if not self._held or not states:
            return not self._held or not states
        progress = self._dispatcher.progress(states)
        suspended = self._gate.suspended
        ok, fenced = self._held.write(progress, self._claims, force, suspended, self._reader.stamps)
        if fenced:
            # Someone else may hold those ranges now; what else is held is re-read from its
            # cursors once the current step (perhaps a drain) is over.
            self._ctx.inbox.post(lambda: self._reread(describe=False))
        self._flushed = self._flushed and ok
        return ok

    # -- applying assignments (poll thread, through the inbox) ---------------------------------

    def _on(self, change: AssignmentChange) -> None:
        if self._closing or self._gate.lost:
            return
        self._apply(change.owned, change.generation)

    def _apply(self, owned: tuple[SlotRange, ...], generation: int) -> None:
        self._generation = generation
        self._desired = owned
        self._gate.metrics.generation(generation)
        self._queue.keep_only(owned)
        self._deferred.keep(owned)
        lost = [slots for slots in self._held if slots not in owned]
        if lost:
            self._rebuild(drop=lost)
        self._queue_missing()

    def _granted(self, slots: SlotRange, lease: Lease) -> None:
        if self._closing or self._gate.lost or slots not in self._desired:
            self._give_back(slots, lease, self.holdings.let_go(str(slots)))
            return
        try:
            self._held.add(slots, lease)
        except Exception as exc:  # ZooKeeper away: give it back, queue again from tick
            log.warning("range %s: taking up its lease failed (%r); queueing again", slots, exc)
            self._give_back(slots, lease, self.holdings.let_go(str(slots)))
            self._missing = True
            return
        # A read from the cursors drains the whole member. A plan moves several ranges at once
        # and their grants arrive one by one: read once when the last one is in, or half a
        # second after the first, not once per grant (docs/chaos.md has the incident).
        if not len(self._queue):
            self._rebuild(drop=[])
        elif self._regain_at is None:
            self._regain_at = time.monotonic() + _REGAIN_COALESCE_S

    def _give_back(self, slots: SlotRange, lease: Lease, holding: Holding | None = None) -> None:
        """A lease granted after it stopped being wanted: released, with retry. ``holding``:
        its holding, if the member still had it (a grant the queue withdrew has none)."""
        self._hand_back.add(str(slots), lambda: self._leases.release(lease), holding=holding)

    def _rebuild(self, drop: list[SlotRange]) -> None:
        """Drain, write cursors, release ``drop``'s leases, then read again from the cursors of
        the ranges still held; once nothing of the windows runs any more (``tick`` retries)."""
        events = self._require_events()
        old_states = [events.states[tp] for tp in self._assigned if tp in events.states]
        if self._deferred.defer(old_states, drop):
            return
        drop = self._deferred.take()
        self._held.draining(drop)
        self._flushed = True
        drained = events.revoked(list(self._assigned)) if self._assigned else True
        committed = self._flushed
        for slots in drop:
            self._held.give_up(slots, drained=drained, committed=committed, stragglers=old_states)
        self._assign_from_cursors()

    def _assign_from_cursors(self) -> None:
        """Assign from the cursors; if reading them fails (ZooKeeper or the broker busy, e.g.
        NOT_COORDINATOR while the group's offsets topic loads), read nothing and try again
        from ``tick`` — never stay holding leases while reading nothing for good."""
        try:
            self._assign_now()
        except Exception as exc:
            log.warning("reading the cursors of %s failed (%r); retrying", self._me, exc)
            self._assign_retry_at = time.monotonic() + _ASSIGN_RETRY_S
            with contextlib.suppress(Exception):
                self._consumer.assign([])
            self._assigned = []
            self._states = []
            self._claims = {}
        else:
            self._assign_retry_at = None
            self._queue_again()

    def _queue_again(self) -> None:
        """Queue for the ranges the plan in force gives this member that it neither holds nor
        waits for: a lease found gone (fenced) outside a session loss, or a queueing, a grant
        or the queue's own retry that ZooKeeper's absence broke. Waiting for the next plan
        would leave them read by nobody until some member comes or goes."""
        for slots in self._held.take_fenced():
            log.info("range %s: its lease was found gone; queueing for it again", slots)
        self._queue_missing()

    def _queue_missing(self) -> None:
        """Queue for every wanted range neither held nor queued; a failure is retried from
        ``tick``."""
        self._missing = False
        if not self._gate.lost and not self._closing:
            queued = self._queue.queue_missing(self._desired, self._held, self._generation)
            self._missing = not queued

    def _assign_now(self) -> None:
        events = self._require_events()
        # Staged cursors first: the stored ones are older, and reading them over this member's
        # own progress would replay records. Raises if they cannot be written yet: the caller
        # reads nothing and retries.
        self._held.write_pending(self._gate.suspended)
        self._regain_at = None  # every range held now is read below
        self._rereading = False
        held = self._held.tokens()
        self._claims = {}
        if held:
            self._claims = self._reader.read(self._consumer, held)
        targets = [
            TopicPartition(t, p, claims.start)
            for (t, p), claims in sorted(self._claims.items())
            if claims.start is not None
        ]
        self._consumer.assign(targets)
        if targets:
            self._consumer.resume(targets)
        self._assigned = [(tp.topic, tp.partition) for tp in targets]
        if self._assigned:
            events.assigned(list(self._assigned))
        self._states = [events.states[tp] for tp in self._assigned if tp in events.states]
        for state in self._states:
            state.fencing = token_lookup(self._claims[state.tp], self._admission.slot)
        slots_held = sum(slots.hi - slots.lo + 1 for slots in self._held)
        for topic in self._ctx.topics:
            self._gate.metrics.owned(topic, ranges=len(self._held), slots=slots_held)
        log.info(
            "member %s holds %s (generation %d); reading %s",
            self._me,
            ", ".join(str(s) for s in sorted(self._held)) or "nothing",
            self._generation,
            ", ".join(f"{t.topic}[{t.partition}]@{t.offset}" for t in targets) or "nothing",
        )

    # -- losing ranges without a drain --------------------------------------------------------

    def _fence(self) -> None:
        """The session expired: every lease is gone. Drop all results, commit nothing."""
        events = self._require_events()
        self._queue.cancel_all()
        self._held.clear()
        self._deferred.clear()
        self._claims = {}
        # Handlers of the fenced work may still run: the dispatcher's hold (FencedKeys) keeps
        # their keys, and only theirs, from starting here again until they end.
        if self._assigned:
            events.lost(list(self._assigned))
        self._assigned = []
        self._states = []
        with contextlib.suppress(KafkaException):
            self._consumer.assign([])

    def _check_kafka(self) -> None:
        """A member cut off from Kafka but not from ZooKeeper would otherwise hold its range
        leases, reading nothing, for as long as the cut lasts (see kafka_liveness.py)."""
        if self._closing or self._membership is None or not self._gate.connected():
            return
        self._withdrawal.check(self._membership.leave, self._join)

    def _renewed(self) -> None:
        """A new session after an expiry: join again and take up the assignment in force."""
        if self._closing or self._withdrawal.withdrawn:
            return
        self._join()
        current = self._watch.current if self._watch is not None else None
        if current is not None:
            self._apply(tuple(current.assignment.ranges_of(self._me)), current.generation)

    def _join(self) -> None:
        filters, topics = tuple(self._options.key_filters), tuple(self._ctx.topics)
        info = MemberInfo(self._me, key_filters=filters, mode="key_shared", topics=topics)
        self._membership = self._zk.join(self._group, info)
