"""What a consumer does when its ZooKeeper session wavers; shared by every mode.

- **suspended** (connection dropped, session maybe alive): start no handler. Dispatch is paused
  at once, from the session's own thread, because the poll thread may be busy draining.
  Records keep being admitted until the windows fill, then the usual backpressure pauses the
  fetches. Handlers already running finish, and cursor writes wait: a suspended member cannot
  know whether it still holds anything.
- **resumed** (same session): dispatch what queued up meanwhile.
- **lost** (expired): every lease and lock is gone and another member may own the work now.
  The mode's ``on_lost`` drops all results without committing (fencing).
- **renewed** (a new session after a loss): the mode's ``on_renewed`` rejoins as a new member.

- **stale** (no ZooKeeper round trip for half a session timeout): start no handler until one
  succeeds. A member stalled past its session (SIGSTOP, a long GC pause) resumes with records
  queued and a session it does not yet know is gone; kazoo tells it only after a round trip,
  and meanwhile its workers would start records that a new owner may already have run. Every
  round trip that succeeds proves the session alive for a while after it was sent, so dispatch
  is allowed only within that window.

Each reason is a named hold on dispatch with one owner that takes and lifts it: the
connection hold (``zookeeper-connection``) is taken by the session watcher and lifted by the
poll thread as it applies RESUMED, LOST or RENEWED; the liveness hold
(:data:`~keyshared.runtime.dispatcher.LIVENESS_HOLD`) is taken by dispatch itself when a record
finds the member not live, and lifted by the prober after every round trip that leaves the
member live, whether or not the hold was there and whenever the round trip was sent. So
neither owner can lift the other's reason, and a hold never outlives the reason it was taken
for: a prober that lifted only when its own probe had been sent outside the liveness window
left a hold taken while a slow probe was in flight in place for good.

A member that keeps running handlers past its session's expiry (started before the stall) is
the one overlap this cannot prevent; it is why every record carries a fencing token (see
``docs/coordinator.md``).

Three threads share the flags: the session watcher flags a loss and takes the connection
hold, the prober lifts the liveness hold, the poll thread applies every event. The flags are
one immutable value swapped under a lock, and each check-then-act (flag and take; check and
lift) is one step under that lock. ``live()`` is read by the dispatcher under its own lock, so
it takes no lock (one float read).

State machine of the connection hold::

    CONNECTED --SUSPENDED/LOST (watcher: take)--> HELD
    HELD --RESUMED, not lost (poll thread: lift)--> CONNECTED
    HELD --LOST (poll thread: fence, then lift)--> FENCED --RENEWED--> CONNECTED (rejoined)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from kazoo.client import KazooState

from coordinator.session import SessionEvent, SessionState
from keyshared.core.health import Role
from keyshared.kafka.seams import PlugContext
from keyshared.metrics import CoordinatorMetrics
from keyshared.runtime.dispatcher import LIVENESS_HOLD

if TYPE_CHECKING:
    from coordinator.session import SessionWatcher
    from keyshared.modes.recipes import Recipes

__all__ = ["CONNECTION_HOLD", "SessionGate"]

log = logging.getLogger(__name__)

_ALIVE_FRACTION = 0.5  # a round trip proves the session for this share of its timeout
_PROBE_FRACTION = 0.2  # probe this often (of the timeout): a stall of ~0.3 timeouts pauses

CONNECTION_HOLD = "zookeeper-connection"  # taken by the session watcher, lifted by the poll thread


class _Flags(NamedTuple):
    suspended: bool = False
    lost: bool = False


class SessionGate:
    """Applies session events to one consumer run.

    :param zk: the coordinator whose session is watched.
    :param context: the consumer run.
    :param on_lost: fence everything (runs on the poll thread).
    :param on_renewed: rejoin after a loss (runs on the poll thread).
    :param clock: the monotonic clock the liveness window is measured with.
    """

    def __init__(
        self,
        zk: Recipes,
        context: PlugContext,
        on_lost: Callable[[], None],
        on_renewed: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._zk = zk
        self._clock = clock
        self._ctx = context
        self._on_lost = on_lost
        self._on_renewed = on_renewed
        self.metrics = CoordinatorMetrics(context.group, context.member_id)
        self._lock = threading.Lock()  # order: this lock, then the dispatcher's
        self._flags = _Flags()
        self._takes = 0  # connection holds taken by the watcher (see _on_event)
        self._watcher: SessionWatcher | None = None
        timeout = zk.session_timeout
        self._alive_for = timeout * _ALIVE_FRACTION
        self._probe_every = timeout * _PROBE_FRACTION
        self._alive_until = clock() + self._alive_for
        self._stopping = threading.Event()
        self._prober: threading.Thread | None = None

    def start(self) -> None:
        """Watch the session from now on, and gate dispatch on recent proof that it lives."""
        self._watcher = self._zk.watch_session(self._on_event)
        self.metrics.session("connected")
        self._ctx.metrics.declare_holds((CONNECTION_HOLD, LIVENESS_HOLD))
        self._ctx.dispatcher.set_liveness(self.live)
        self._prober = threading.Thread(
            target=self._probe, name="keyshared-zk-liveness", daemon=True
        )
        self._prober.start()

    @property
    def suspended(self) -> bool:
        return self._flags.suspended

    @property
    def lost(self) -> bool:
        return self._flags.lost

    def connected(self) -> bool:
        """Whether ZooKeeper can be written for this session now (not suspended, not lost)."""
        flags = self._flags
        return not (flags.suspended or flags.lost)

    def await_connection(self) -> bool:
        """Wait, at most one session timeout, for a dropped connection to come back; True if
        it did within the session. For a hand-over's final commit: refused while suspended, it
        would leave finished records to the next owner; past a session timeout away the
        session has expired, and its lease or lock with it (kazoo says LOST on reconnect).
        And for the exclusive role's lock check after a producer's initialisation: giving the
        role up for a blip would be a fail-over. Poll thread only (the session's events wait
        in its inbox meanwhile)."""
        client = self._zk.client
        changed = threading.Event()

        def listener(_state: str) -> bool:
            changed.set()
            return False

        client.add_listener(listener)
        waited = False
        try:
            deadline = time.monotonic() + self._zk.session_timeout
            while client.state == KazooState.SUSPENDED and not self.lost:
                waited = True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                changed.wait(remaining)
                changed.clear()
        finally:
            client.remove_listener(listener)
        if self.lost or client.state != KazooState.CONNECTED:
            return False
        if waited:
            log.info("ZooKeeper connection back within the session: going on")
        with self._lock:
            self._flags = self._flags._replace(suspended=False)  # RESUMED follows via the inbox
        return True

    def live(self) -> bool:
        """Whether a round trip to ZooKeeper succeeded recently enough to trust the session."""
        return self._clock() < self._alive_until

    def _probe(self) -> None:
        """A cheap ZooKeeper read every ``session_timeout / 5``; each success extends the
        window in which this member may start handlers (:meth:`proved`)."""
        client = self._zk.client
        while not self._stopping.wait(self._probe_every):
            sent = self._clock()
            try:
                client.exists("/")
            except Exception:
                continue  # no proof this time; the session events say what happened
            self.proved(sent)

    def proved(self, sent: float) -> None:
        """A round trip sent at ``sent`` succeeded: the session lived then, so it lives for
        ``alive_for`` after it. If the member is live now, lift the liveness hold, whether or
        not one is in place: a hold may have been taken while this very probe was in flight.

        Caller: the prober thread. Affects: the liveness window and the liveness hold.
        """
        with self._lock:
            self._alive_until = max(self._alive_until, sent + self._alive_for)
            if self.live() and self._ctx.dispatcher.lift_hold(LIVENESS_HOLD):
                log.info("ZooKeeper answers again: dispatch resumed")

    def _on_event(self, event: SessionEvent) -> None:
        """On the session watcher's thread: act at once where it must, post the rest.

        Each SUSPENDED or LOST takes the connection hold here and counts a new *take*; every
        event carries the count it was posted under, so an event that lifts (RESUMED, a
        handled LOST, RENEWED) lifts only if no later take happened meanwhile: a RESUMED
        still in the inbox must not reopen dispatch over the next SUSPENDED.
        """
        state = event.state
        with self._lock:
            if state in (SessionState.SUSPENDED, SessionState.LOST):
                # Flag first, on this thread: the liveness prober must not reopen dispatch
                # before the poll thread has handled the event.
                flags = self._flags
                self._flags = _Flags(
                    flags.suspended or state is SessionState.SUSPENDED,
                    flags.lost or state is SessionState.LOST,
                )
                self._takes += 1
                self._ctx.dispatcher.take_hold(CONNECTION_HOLD)
            takes = self._takes
        self._ctx.inbox.post(lambda: self._apply(state, takes))

    def _apply(self, state: SessionState, takes: int | None = None) -> None:
        """On the poll thread, in the order the events came. ``takes``: the count of takes
        when the event was posted (None: the current one)."""
        if state is SessionState.SUSPENDED:
            with self._lock:
                self._flags = self._flags._replace(suspended=True)
            self.metrics.session("suspended")
            log.warning("ZooKeeper connection lost: dispatch paused until it is back")
        elif state is SessionState.RESUMED:
            with self._lock:
                if not self._latest(takes) or self._flags.lost:
                    return  # a later SUSPENDED or LOST is next in the inbox: it decides
                self._flags = self._flags._replace(suspended=False)
                self._ctx.dispatcher.lift_hold(CONNECTION_HOLD)
            self.metrics.session("connected")
            log.info("ZooKeeper connection back within the session: dispatch resumed")
        elif state is SessionState.LOST:
            with self._lock:
                self._flags = _Flags(suspended=False, lost=True)
            self.metrics.session("lost")
            self.metrics.fenced()
            log.error("ZooKeeper session expired: fencing, in-flight results are discarded")
            self._on_lost()
            with self._lock:
                if self._latest(takes):
                    self._ctx.dispatcher.lift_hold(CONNECTION_HOLD)  # what it held is dropped
        elif state is SessionState.RENEWED:
            with self._lock:
                latest = self._latest(takes)
                self._flags = _Flags(suspended=not latest)
                if latest:
                    self._ctx.dispatcher.lift_hold(CONNECTION_HOLD)
            self.metrics.session("connected")
            log.info("new ZooKeeper session: rejoining")
            self._on_renewed()

    def _latest(self, takes: int | None) -> bool:
        """Whether no connection hold was taken after an event posted under ``takes`` (lock
        held)."""
        return takes is None or takes == self._takes

    def role(self, joined: bool) -> Role:
        """The member's role as the session allows it: fenced or suspended first, else
        ``MEMBER`` once ``joined`` (any mode's idea of it) and ``JOINING`` before."""
        flags = self._flags
        if flags.lost:
            return Role.FENCED
        if flags.suspended:
            return Role.SUSPENDED
        return Role.MEMBER if joined else Role.JOINING

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        self.metrics.session("closed")
        self.metrics.close()
