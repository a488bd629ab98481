"""What every coordinated mode member is: one ZooKeeper session, the holdings it carries from
queued to released, and the order of join, tick and leave around them.

``key_shared``, partition leases and ``exclusive`` differ in what they hold (slot ranges,
partition leases, the lock) and in how they win and lose it; they do not differ in how a member
lives. Each watches its session through a :class:`~keyshared.modes.session_gate.SessionGate`,
carries each held thing as one holding (:class:`~keyshared.modes.holdings.Holdings`, then the
:class:`~keyshared.modes.handback.HandBack`), and must, at shutdown, give everything to the
hand-back before the session stops and close the session only once the hand-back has released
it. That order is where "release only when no call of its keys runs" is kept at shutdown, so it
is written once, here; each mode's class keeps its own state machine (drawn in its docstring)
and fills the hooks.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from keyshared.core.health import Role
from keyshared.core.holding import HoldingView, count_phases
from keyshared.kafka.kafka_consumer import NOT_JOINED, KafkaConsumer
from keyshared.kafka.seams import MembershipEvents, PlugContext
from keyshared.modes.handback import HandBack
from keyshared.modes.holdings import Holdings, views
from keyshared.modes.session_gate import SessionGate

if TYPE_CHECKING:
    from coordinator.members import Membership
    from keyshared.modes.recipes import Recipes

__all__ = ["CoordinatedMember"]


class CoordinatedMember(ABC):
    """The life cycle every mode member shares (:class:`~keyshared.kafka.seams.GroupMembership`)::

        constructed: session connected, nothing held
            │ join (poll loop, once): _prepare; session watched; _take_part
            ▼
        JOINED ◀──────────────────────────────┐ session lost: _fence (every lease and lock
            │ tick (poll loop, each           │ gone); renewed: _renewed (take part again)
            ▼ iteration)                      │
        TICKING: _before_releases; hand-back releases what is idle;
            │    holdings gauge; _after_releases
            │ leave (poll loop, once, after the final commit)
            ▼
        LEAVING: closing; _give_everything_back; session watch stopped; _session_stopped;
            │    member znode removed
            │ the hand-back has released everything (at once, or on its keeper thread
            ▼ once the handlers past drain_timeout end)
        SESSION CLOSED

    A mode fills the hooks: :meth:`_prepare` and :meth:`_take_part` (join),
    :meth:`_before_releases` and :meth:`_after_releases` (tick), :meth:`_give_everything_back`
    and :meth:`_session_stopped` (leave), :meth:`_joined` (role), and the session's
    :meth:`_fence` and :meth:`_renewed`. Every method runs on the poll thread except
    :meth:`role` and :meth:`holding_views`, which read published values from any thread.

    Example::

        class Mine(CoordinatedMember):
            _mode = "mine"   # the keyshared_holdings gauge's mode label
            ...              # the hooks: what this mode wants, holds and gives back

    :param zk: the coordinator (started); its session is this member's for the run.
    :param context: the consumer run it plugs into.
    """

    _mode: ClassVar[str]  # the mode label of the holdings gauge

    def __init__(self, zk: Recipes, context: PlugContext) -> None:
        self._zk = zk
        self._ctx = context
        self._gate = SessionGate(zk, context, on_lost=self._fence, on_renewed=self._renewed)
        self._hand_back = HandBack(context.dispatcher, self._gate.connected)
        self.holdings = Holdings()  # each held thing's phase, from queued to handed back
        self._consumer: KafkaConsumer = NOT_JOINED
        self._events: MembershipEvents | None = None
        self._membership: Membership | None = None  # the member znode, in modes that have one
        self._closing = False

    def join(self, consumer: KafkaConsumer, topics: list[str], events: MembershipEvents) -> None:
        """Caller: the poll loop, once, before the first poll. Affects: the consumer and the
        events are bound; the mode prepares; the session is watched from then on (a loss
        fences, a renewal rejoins); then the mode takes part."""
        self._consumer, self._events = consumer, events
        self._prepare(consumer, topics, events)
        self._gate.start()
        self._take_part(topics)

    def tick(self) -> None:
        """Caller: the poll loop, every iteration. Affects: the mode's due work first (it may
        give things back), then the hand-back's releases, the holdings gauge as they leave it,
        and what waited for a release."""
        self._before_releases()
        self._hand_back.tick()
        self._gate.metrics.holdings(self._mode, count_phases(self.holding_views()))
        self._after_releases()

    def leave(self) -> None:
        """Caller: the poll loop, once, after the final commit. Affects: closing from now on;
        everything held goes to the hand-back; the session watch stops; the member znode goes;
        the session closes once the hand-back has released everything (on a keeper thread if
        handlers past ``drain_timeout`` still run: the next owner never overlaps them)."""
        self._closing = True
        self._give_everything_back()
        self._gate.stop()
        self._session_stopped()
        with contextlib.suppress(Exception):
            if self._membership is not None:
                self._membership.leave()
        self._hand_back.leave(self._zk.close)

    def holding_views(self) -> tuple[HoldingView, ...]:
        """Caller: any thread (``/readyz``, ``keyshared status``, the holdings gauge). Affects:
        nothing. Every holding this member wants, holds or hands back, with its phase
        (published copies)."""
        return views(self.holdings, self._hand_back)

    def role(self) -> Role:
        """Caller: the health endpoint's thread. Affects: nothing. Fenced or suspended as the
        session says, else a member once the mode has :meth:`_joined`."""
        return self._gate.role(joined=self._joined())

    def _require_events(self) -> MembershipEvents:
        assert self._events is not None, "join() has not been called"
        return self._events

    # -- the mode's hooks --------------------------------------------------------------------

    @abstractmethod
    def _prepare(
        self, consumer: KafkaConsumer, topics: list[str], events: MembershipEvents
    ) -> None:
        """What must stand before the session is watched (a loss would fence it)."""

    @abstractmethod
    def _take_part(self, topics: list[str]) -> None:
        """Start taking part, the session watched: contend, queue, subscribe or follow a plan."""

    def _before_releases(self) -> None:  # noqa: B027 - optional: a mode may have nothing due
        """The tick's due work that may give things back (released by the same tick)."""

    @abstractmethod
    def _after_releases(self) -> None:
        """The tick's work that waited for a release, or retries what could not be done."""

    @abstractmethod
    def _give_everything_back(self) -> None:
        """Leaving (``_closing`` is set): withdraw what is queued, hand what is held to the
        hand-back; the session still watched."""

    def _session_stopped(self) -> None:  # noqa: B027 - optional: a mode may watch nothing else
        """Leaving, the session watch stopped: stop what else watches for the member."""

    @abstractmethod
    def _joined(self) -> bool:
        """Whether the mode counts the member as taken part (its ``role`` is MEMBER)."""

    @abstractmethod
    def _fence(self) -> None:
        """The session expired: every lease and lock is gone; discard, commit nothing."""

    @abstractmethod
    def _renewed(self) -> None:
        """A new session after an expiry: take part again."""
