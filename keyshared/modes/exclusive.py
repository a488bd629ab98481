"""``exclusive`` mode (``ordering_required``) with the coordinator: one active member per group.

Every member connects and contends for the group's kazoo Lock
(:class:`~coordinator.exclusive.ExclusiveLock`) on a thread of its own; the poll loop keeps
running meanwhile (with nothing assigned), so ``consumer.stop()`` ends a standby at once. The
holder is the one active member: it assigns itself every partition of its topics, from the
committed offsets, and processes them strictly serially per partition (the dispatcher runs one
ordered lane per partition in this mode). The others are standbys.

Why ``assign`` rather than a Kafka group subscription: the lock already makes the member
exclusive, and a subscription would tie failover to the Kafka group's own session timeout
(``session.timeout.ms``, 45 s by default): after ``kill -9`` of the active member, a standby's
JoinGroup waits until the broker gives up on the dead member. With ``assign`` failover takes the
ZooKeeper session timeout plus a fetch. Commits still go to the group id, so lag tools work (the
group shows as ``Empty`` with committed offsets). Partitions added to a topic while a member is
active are picked up at its next activation.

- **commits** carry the lock: refused unless this member's lock znode is still the lowest of
  the group's contenders (one ``get_children`` per commit), and counted as fenced otherwise.
- **session lost**: fence (``events.lost`` for everything, unassign, commit nothing) and go
  back to standby: a new candidacy once the session is renewed. Handlers that were running go
  on until they finish; a renewed candidacy that wins starts only after they have.
- **records** carry the lock's token (its sequence number, larger for every later holder).
- **exactly-once**: ``assign()`` gives group metadata with generation -1, which the broker
  never checks, so the lock check before a commit is the only ZooKeeper-side fence, and it is
  check-then-act. The broker-side fence is the active role's one ``transactional.id``
  (:class:`~keyshared.kafka.active_role.ActiveRole`): the producer is built at activation,
  after the lock is won and before the committed offsets are read; its ``init_transactions``
  fences the last active member's producer and settles that one's open transaction, and the
  lock is checked again after it. A member stalled between its lock check and its commit
  (a zombie) has its transaction refused; a fenced producer gives the role up. Those lock
  checks ``sync`` first and wait out a dropped connection (a blip is no fail-over). A role
  the broker refuses for good (no ACL on the id) stops the run with a ``ConfigurationError``,
  as a missing topic does: no member could be active.
- **Kafka silent** past ``session.timeout.ms`` (cut off from Kafka, not ZooKeeper): the lock
  would stand while the member reads nothing, and every standby would wait for as long as the
  cut lasts. A standby leaves the queue then, and queues again once Kafka answers. The active
  member gives the role up, like a lost activity (nothing can be committed: Kafka does not
  answer; the lock goes once its running handlers end), but only a grace period later and only
  if a standby is queued, that is, reaches Kafka: when Kafka is away for everyone (a broker
  restart on a one-broker cluster), the standbys have left the queue by then and the active
  member keeps the role, instead of a failover that would redo all it finished uncommitted.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, TopicPartition
from kazoo.exceptions import KazooException

from coordinator.errors import AcquireCancelled
from coordinator.exclusive import ExclusiveLock
from keyshared.core.health import Role
from keyshared.core.types import TP
from keyshared.errors import ConfigurationError, KeySharedError
from keyshared.kafka.commits import Committer
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.kafka.offset_retention import OffsetRetention
from keyshared.kafka.seams import MembershipEvents, PlugContext
from keyshared.kafka.transactions import TransactionalCommitter
from keyshared.modes.coordinated_member import CoordinatedMember
from keyshared.modes.handback import gone
from keyshared.modes.kafka_liveness import KafkaLiveness, RoleWithdrawal

if TYPE_CHECKING:
    from keyshared.modes.recipes import Recipes
    from keyshared.runtime.partition import PartitionState

__all__ = ["ExclusiveMember"]

log = logging.getLogger(__name__)

_ACTIVE = "the active role"  # the one thing an exclusive member holds
_CONTEND_AGAIN_S = 1.0  # after a wait for the lock broke: a persistent error retries this often


class _Candidacy:
    """One attempt to become active: a lock and the thread that waits for it.

    :param lock: a fresh lock recipe (a lock object does not outlive its session here).
    :param post: hands a callable to the poll thread.
    :param on_active: called on the poll thread with this candidacy once the lock is held.
    :param on_failed: called on the poll thread with this candidacy if the wait broke (not
        cancelled): nobody else would contend again while the session lives.
    """

    def __init__(
        self,
        lock: ExclusiveLock,
        post: Callable[[Callable[[], None]], None],
        on_active: Callable[[_Candidacy], None],
        on_failed: Callable[[_Candidacy], None],
    ) -> None:
        self.lock = lock
        self.since = time.monotonic()
        self._post = post
        self._on_active = on_active
        self._on_failed = on_failed
        self._thread = threading.Thread(target=self._wait, name="keyshared-standby", daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        try:
            acquired = self.lock.acquire(timeout=None)
        except AcquireCancelled:
            return
        except Exception:
            log.exception("waiting to become the active member failed; contending again")
            self._post(lambda: self._on_failed(self))
            return
        if acquired:
            self._post(lambda: self._on_active(self))

    def withdraw(self) -> None:
        """Stop waiting, and give the lock up if it was granted (any thread)."""
        with contextlib.suppress(Exception):  # disconnected: the lock goes with the session
            self.give_up()

    def give_up(self) -> None:
        """Stop waiting and release the lock; raises if ZooKeeper could not be told (the
        caller retries: a lock left standing would keep every standby waiting)."""
        self.lock.cancel()
        self.lock.release()


class ExclusiveMember(CoordinatedMember):
    """The consumer's membership and cursor store in ``exclusive`` mode (module docstring).

    The active role is one holding (:attr:`holdings`, named "the active role")::

        stand by ─▶ WAITING ─lock won, activated─▶ ACTIVE
                      │ (a standby; or won and waiting    │ Kafka silent, producer fenced,
                      │  for the fenced activity's calls) │ session expired, leaving
                      │                                   ▼
                      │ activation failed, fenced  ─▶ HANDING_BACK
                      │ producer, leaving                 │ no call of the activity runs
                      │                                   ▼
                      │                               RELEASED (lock given up)
                      │ Kafka silent, session expired, a role the broker refuses,
                      │ the wait for the lock broken: withdrawn (the lock recipe
                      ▼ gives the place up itself)
                  (forgotten) ─▶ stand by again (renewed session, Kafka answering, or a
                                 second after a broken wait)

    The holding never enters DRAINING: the consumer's final drain at shutdown is over before
    :meth:`leave`, and every other end of an activity discards and commits nothing.

    :param zk: the coordinator (started); its session is this member's for the run.
    :param context: the consumer run it plugs into.
    """

    _mode = "exclusive"

    def __init__(self, zk: Recipes, context: PlugContext) -> None:
        super().__init__(zk, context)
        self._group = context.group
        self._me = context.member_id
        self._active_dir = zk.layout(context.group).active
        self._committer: Committer | None = None
        self._role_producer: TransactionalCommitter | None = None  # exactly-once only
        self._topics: list[str] = []
        self._candidacy: _Candidacy | None = None
        self._ready: _Candidacy | None = None  # won, waiting for fenced stragglers to finish
        self._assigned: list[TP] = []
        self._states: list[PartitionState] = []  # of the activity: the lock waits for them
        self._starts: dict[TP, tuple[int | None, str]] = {}  # the activation's read
        self._kafka = KafkaLiveness(context.kafka_config, context.topics)
        self._aside = RoleWithdrawal(self._kafka, self._me, self._group, self._standby_queued)
        self._failure: ConfigurationError | None = None  # stops the run at the next tick
        self._contend_at: float | None = None  # a broken wait: contend again then (tick)

    @property
    def active(self) -> bool:
        """Whether this member is the active one and dispatching."""
        return bool(self._assigned)

    # -- Membership (the life cycle is CoordinatedMember's) ------------------------------------

    def rewound(self, tp: tuple[str, int]) -> bool:
        """Kafka's committed offsets are the cursors: the poll loop starts the partition again
        where the fetch went back to (keyshared/kafka/rewinds.py)."""
        return False

    def role(self) -> Role:
        """Active while it holds the lock and its partitions; a standby while it contends with a
        healthy session (ready: it takes over when the active member fails)."""
        role = super().role()
        if role is not Role.MEMBER:
            return role
        return Role.ACTIVE if self._assigned else Role.STANDBY

    def _joined(self) -> bool:
        """Contending (a standby or the active member)."""
        return self._candidacy is not None

    def _prepare(
        self, consumer: KafkaConsumer, topics: list[str], events: MembershipEvents
    ) -> None:
        self._topics = list(topics)
        self._committer = self._ctx.kafka_committer or Committer(
            consumer, self._ctx.metrics, self._ctx.dispatcher, lambda tp: events.states.get(tp)
        )
        # assign(): a group without Kafka members, whose offsets Kafka expires however busy
        # the group is; they are this mode's progress, so they are refreshed within that time.
        retention = OffsetRetention(self._ctx.kafka_config).start()
        self._committer.follow_retention(lambda: retention.refresh_every)
        if isinstance(self._committer, TransactionalCommitter):
            self._role_producer = self._committer
            self._role_producer.serve_role(self)

    def _take_part(self, topics: list[str]) -> None:
        self._kafka.start()
        self._stand_by()

    def _before_releases(self) -> None:
        """Step aside while Kafka is silent, and back once it answers."""
        if not self._closing and self._gate.connected() and not self._gate.lost:
            self._aside.check(bool(self._assigned), self._step_aside, self._stand_by)

    def _after_releases(self) -> None:
        """Contend again after a broken wait; activate a won candidacy once the handlers of a
        fenced activity have finished; stop the run for a role no member can take."""
        contend_at = self._contend_at
        if contend_at is not None and time.monotonic() >= contend_at and self._may_contend():
            self._stand_by()
        if self._ready is not None and not self._hand_back.busy(_ACTIVE):
            ready, self._ready = self._ready, None
            self._activate(ready)
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure  # out of the poll loop: run() ends with it

    def _give_everything_back(self) -> None:
        """After the final commit: stop waiting, or give up the active role once no handler
        of the activity runs any more (a drain past ``drain_timeout`` leaves some: the lock
        stands until they end, so the next active member never overlaps them); the session
        then ends."""
        candidacy, self._candidacy = self._candidacy, None
        self._drop_role_producer()
        if candidacy is not None:
            candidacy.lock.cancel()
            self._let_go(candidacy.give_up, self._activity_states())

    def _session_stopped(self) -> None:
        self._kafka.stop()

    # -- becoming active -------------------------------------------------------------------------

    def _stand_by(self) -> None:
        """Contend for the active role (at start, and again after a lost session)."""
        if self._closing:
            return
        self._contend_at = None
        lock = self._zk.exclusive(self._group, self._me)
        self.holdings.want(_ACTIVE)
        self._candidacy = _Candidacy(lock, self._ctx.inbox.post, self._activate, self._wait_failed)
        log.info("%s is a standby of exclusive group %s", self._me, self._group)

    def _wait_failed(self, candidacy: _Candidacy) -> None:
        """The wait for the lock broke while the session lives (a session loss is the gate's:
        it withdraws the candidacy and stands by again once renewed). Out of the queue, and in
        again after a pause: left as it was, this member would be a standby for good — ready,
        and reading nothing even with no other member left."""
        if candidacy is not self._candidacy or self._closing or self._gate.lost:
            return
        self._candidacy = None
        candidacy.withdraw()
        self.holdings.withdraw(_ACTIVE)
        self._contend_at = time.monotonic() + _CONTEND_AGAIN_S

    def _may_contend(self) -> bool:
        """Whether a retry of a broken wait may contend now: not already contending, the
        session connected, and not stepped aside for Kafka's silence (its return contends)."""
        return (
            self._candidacy is None
            and not self._closing
            and not self._gate.lost
            and self._gate.connected()
            and not self._aside.withdrawn
        )

    def _renewed(self) -> None:
        """A new session after an expiry: contend again, unless Kafka is silent (then the
        Kafka check contends once it answers)."""
        if not self._aside.withdrawn:
            self._stand_by()

    def _standby_queued(self) -> bool:
        """Whether another member queues for the lock (so it reaches Kafka)."""
        return len(self._zk.client.get_children(self._active_dir)) > 1

    def _step_aside(self) -> None:
        """Kafka is silent past ``session.timeout.ms``: give the active role, or the place in
        the queue, up to a member that reaches Kafka. Like a lost activity, nothing is
        committed (Kafka does not answer) and the lock stands until the running handlers end."""
        candidacy, self._candidacy = self._candidacy, None
        self._ready = None
        if candidacy is None:
            return
        if not self._assigned:
            candidacy.withdraw()  # a standby: out of the queue
            self.holdings.withdraw(_ACTIVE)
            return
        self._end_activity(candidacy)

    def _end_activity(self, candidacy: _Candidacy) -> None:
        """Give the active role up while the session stands: nothing more is committed, the
        partitions go, and the lock stands until the activity's running handlers end."""
        self._require_events().lost(list(self._assigned))
        states = self._activity_states()
        self._assigned, self._states = [], []
        self._drop_role_producer()
        with contextlib.suppress(KafkaException):
            self._consumer.assign([])
        candidacy.lock.cancel()
        self._let_go(candidacy.give_up, states)

    def _activate(self, candidacy: _Candidacy) -> None:
        """The lock is ours: read every partition from its committed offset, serially."""
        if candidacy is not self._candidacy or self._closing or self._gate.lost:
            candidacy.withdraw()  # a stale win (the session was lost meanwhile, or stopping)
            return
        if self._hand_back.busy(_ACTIVE):
            log.info("active role won; waiting for the handlers of the fenced activity")
            self._ready = candidacy
            return
        events, committer = self._require_events(), self._committer
        assert committer is not None
        timeout = self._ctx.options.startup_timeout
        try:
            if self._role_producer is not None:
                # Before the committed offsets are read: fences the last active member's
                # producer and settles its open transaction, then checks the lock again.
                self._role_producer.activate()
            partitions = _partitions_of(self._consumer, self._topics, timeout)
            starts = committer.starting_points(partitions, timeout)
        except ConfigurationError as exc:
            # A topic is missing, or the broker refuses the role's transactional.id: no member
            # can be active, and handing the lock on would only have the next one fail alike.
            self._stop_for(candidacy, exc)
            return
        except (KeySharedError, KafkaException) as exc:
            # Kafka did not answer in time (a rolling restart, a stale coordinator): another
            # member may reach it. Stopping here left the group one member short for good.
            self._give_up(candidacy, exc)
            return
        targets = []
        for tp in partitions:
            offset = starts.get(tp, (None, ""))[0]
            targets.append(TopicPartition(*tp) if offset is None else TopicPartition(*tp, offset))
        self._consumer.assign(targets)
        self._assigned = partitions
        # The windows start where the consumer was assigned, without a second round trip.
        self._starts = starts
        try:
            events.assigned(list(partitions))
        except Exception as exc:  # e.g. the key-state read timed out
            self._give_up(candidacy, exc)
            return
        self.holdings.grant(_ACTIVE)
        token = candidacy.lock.token
        self._states = [s for tp in partitions if (s := events.states.get(tp)) is not None]
        for state in self._states:
            state.fencing = lambda _key, _offset: token
        self._gate.metrics.handover_waited(time.monotonic() - candidacy.since)
        log.info(
            "%s is the active member of %s (token %d): %s",
            self._me,
            self._group,
            token,
            ", ".join(f"{t}[{p}]@{starts.get((t, p), (None, ''))[0]}" for t, p in partitions),
        )

    def _stop_for(self, candidacy: _Candidacy, exc: ConfigurationError) -> None:
        """End the role like every other end (producer dropped, lock given up) and stop the
        run: ``run()`` raises ``exc`` from the next tick."""
        log.error("%s won the active role but %s; stopping", self._me, exc)
        self._drop_role_producer()
        candidacy.withdraw()
        self._candidacy = None
        self.holdings.withdraw(_ACTIVE)
        self._failure = exc

    def _give_up(self, candidacy: _Candidacy, exc: Exception) -> None:
        """Activation failed: holding the lock while processing nothing would keep every
        standby waiting for good. Give it up (with retry) and stand by again."""
        log.error("%s could not become active (%r); standing by again", self._me, exc)
        self._drop_role_producer()
        with contextlib.suppress(KafkaException):
            self._consumer.assign([])
        self._assigned, self._starts = [], {}
        self._candidacy = None
        self._let_go(candidacy.give_up)
        self._stand_by()

    def _let_go(
        self,
        release: Callable[[], None],
        states: list[PartitionState] | None = None,
        *,
        alive: bool = True,
    ) -> None:
        """Hand the role's holding over to the hand-back: the lock stands until nothing of the
        activity runs any more."""
        holding = self.holdings.let_go(_ACTIVE)
        self._hand_back.add(_ACTIVE, release, states, alive=alive, holding=holding)

    def _activity_states(self) -> list[PartitionState]:
        """Every state of the activity whose calls the lock waits for: those of the activation
        and the dispatcher's stragglers of its partitions (states an exactly-once redo
        replaced since the activation, or drained past ``drain_timeout``)."""
        partitions = {s.tp for s in self._states} | set(self._assigned)
        stragglers = self._ctx.dispatcher.stragglers(partitions)
        return [*(s for s in self._states if s not in stragglers), *stragglers]

    # -- the session ------------------------------------------------------------------------------

    def _fence(self) -> None:
        """The session expired: the lock is gone and a standby may be active already. Discard
        everything, commit nothing, stop reading; a renewed session stands by again."""
        if self._candidacy is not None:
            self._candidacy.withdraw()
            self._candidacy = None
        self._ready = None
        if not self._assigned:
            self.holdings.let_go(_ACTIVE)  # a standby's place went with the session
            return
        events = self._require_events()
        events.lost(list(self._assigned))
        self._drop_role_producer()
        # The lock went with the session; its handlers may still run: kept until they end.
        self._let_go(gone, self._activity_states(), alive=False)
        self._assigned = []
        self._states = []
        with contextlib.suppress(KafkaException):
            self._consumer.assign([])
        log.error("%s lost the active role with its session; back to standby", self._me)

    # -- CursorStore ------------------------------------------------------------------------------

    def starting_points(
        self, partitions: list[TP], timeout: float
    ) -> dict[TP, tuple[int | None, str]]:
        starts, self._starts = self._starts, {}
        if all(tp in starts for tp in partitions):  # read by the activation just now
            return {tp: starts[tp] for tp in partitions}
        assert self._committer is not None
        return self._committer.starting_points(partitions, timeout)

    def leaving(self, partitions: list[TP]) -> None:
        if self._committer is not None:
            self._committer.leaving(partitions)

    def commit_async(self, states: Iterable[PartitionState]) -> None:
        states = list(states)
        if states and self._still_active():
            assert self._committer is not None
            self._committer.commit_async(states)

    def commit_sync(self, states: Iterable[PartitionState]) -> bool:
        states = list(states)
        if not states:
            return True
        if self._gate.suspended:
            self._gate.await_connection()  # refused now, the next member would redo them
        if not self._still_active():
            return False
        assert self._committer is not None
        return self._committer.commit_sync(states)

    def _still_active(self) -> bool:
        """Whether this member's lock znode is still the lowest contender (one read); a commit
        is refused (and counted as fenced) otherwise."""
        candidacy = self._candidacy
        if self._gate.suspended:
            return False  # the session may be gone: wait until it is known
        if candidacy is None or not self._assigned or self._gate.lost:
            self._gate.metrics.fenced()
            log.error("commit refused: %s is not (or may no longer be) the active member", self._me)
            return False
        held = self._lock_is_ours(candidacy)
        if held is None:
            return False
        if held:
            return True
        self._gate.metrics.fenced()
        log.error("commit refused: the active lock of %s is no longer %s's", self._group, self._me)
        return False

    def _lock_is_ours(self, candidacy: _Candidacy, synced: bool = False) -> bool | None:
        """Whether ``candidacy``'s lock znode is the lowest contender now (one read); None if
        ZooKeeper did not answer.

        :param synced: ``sync`` the lock's directory first, so that the server this session
            reads from has applied every write the leader committed before (a follower
            lagging behind would otherwise answer with children already deleted).
        """
        token = candidacy.lock.token
        client = self._zk.client
        try:
            if synced:
                client.sync(self._active_dir)
            children = client.get_children(self._active_dir)
        except KazooException as exc:
            log.warning("checking the active lock failed: %s", exc)
            return None
        sequences = sorted(int(name[-10:]) for name in children)
        return token >= 0 and bool(sequences) and sequences[0] == token

    # -- ActiveRole (the transactional committer, exactly-once only) ---------------------------

    def still_held(self) -> bool:
        """The lock is this member's now: checked before and after each ``init_transactions``
        of the role's producer (unknown counts as not held: that producer then commits
        nothing, and the role is given up).

        Authoritative, not merely recent: the read follows a ``sync``, so a follower that has
        not yet applied a deletion of this member's znode (the session expired while the
        producer was initialised, and the next holder's init fenced it) cannot answer "held".
        A dropped connection is waited out, within the session timeout, rather than taken for
        a loss: CONNECTED again within the session keeps the lock, and giving the role up
        would be a fail-over (every uncommitted record redone) for a blip. Only a lost session
        (or no connection for a whole session timeout) ends it.
        """
        candidacy = self._candidacy
        for _ in range(2):  # a read cut by the connection dropping is made again, once
            if candidacy is None or candidacy is not self._candidacy or self._gate.lost:
                return False
            if self._gate.suspended and not self._gate.await_connection():
                return False
            held = self._lock_is_ours(candidacy, synced=True)
            if held is not None:
                return held
            if not self._gate.await_connection():
                return False
        return False

    def fenced(self) -> None:
        """The role's producer was fenced: another member is active (or the broker ended this
        member's transaction). Called inside a commit, so the role is given up from the
        poll thread's inbox, not under the caller's feet."""
        candidacy = self._candidacy
        self._ctx.inbox.post(lambda: self._role_fenced(candidacy))

    def _role_fenced(self, candidacy: _Candidacy | None) -> None:
        if candidacy is None or candidacy is not self._candidacy:
            return  # that activity ended meanwhile (its activation failed, the session went)
        self._candidacy = None
        self._ready = None
        if self._assigned:
            log.error("%s gave the active role of %s up: its producer was fenced",
                      self._me, self._group)  # fmt: skip
            self._end_activity(candidacy)
        else:
            candidacy.lock.cancel()
            self._let_go(candidacy.give_up)
        self._stand_by()

    def _drop_role_producer(self) -> None:
        if self._role_producer is not None:
            self._role_producer.deactivate()


def _partitions_of(consumer: KafkaConsumer, topics: list[str], timeout: float) -> list[TP]:
    """Every partition of ``topics``; a missing topic is an error naming it."""
    found: list[TP] = []
    for topic in topics:
        try:
            described = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException as exc:
            raise KeySharedError(f"listing the partitions of {topic!r} failed: {exc}") from None
        if described is None or described.error is not None or not described.partitions:
            raise ConfigurationError("topics", f"topic {topic!r} does not exist")
        found.extend((topic, p) for p in sorted(described.partitions))
    return found
