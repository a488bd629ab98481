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
  is allowed only within that window (found by the chaos suite).

A member that keeps running handlers past its session's expiry (started before the stall) is
the one overlap this cannot prevent; it is why every record carries a fencing token (see
``docs/coordinator.md``).

Three threads share the flags: the session watcher flags a loss and pauses dispatch, the
prober reopens dispatch after a stall, the poll thread applies every event. The flags are one
immutable value swapped under a lock, and each check-then-act (flag and pause; check and
reopen) is one step under that lock: a prober that had seen the flags clear could otherwise
reopen dispatch just after the watcher flagged the session lost (issue 24). ``live()`` is read
by the dispatcher under its own lock, so it takes no lock (one float read).
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

if TYPE_CHECKING:
    from coordinator.modes.recipes import Recipes
    from coordinator.session import SessionWatcher

__all__ = ["SessionGate"]

log = logging.getLogger(__name__)

_ALIVE_FRACTION = 0.5  # a round trip proves the session for this share of its timeout
_PROBE_FRACTION = 0.2  # probe this often (of the timeout): a stall of ~0.3 timeouts pauses


class _Flags(NamedTuple):
    suspended: bool = False
    lost: bool = False


class SessionGate:
    """Applies session events to one consumer run.

    :param zk: the coordinator whose session is watched.
    :param context: the consumer run.
    :param on_lost: fence everything (runs on the poll thread).
    :param on_renewed: rejoin after a loss (runs on the poll thread).
    """

    def __init__(
        self,
        zk: Recipes,
        context: PlugContext,
        on_lost: Callable[[], None],
        on_renewed: Callable[[], None],
    ) -> None:
        self._zk = zk
        self._ctx = context
        self._on_lost = on_lost
        self._on_renewed = on_renewed
        self.metrics = CoordinatorMetrics(context.group, context.member_id)
        self._lock = threading.Lock()  # order: this lock, then the dispatcher's
        self._flags = _Flags()
        self._watcher: SessionWatcher | None = None
        timeout = zk.session_timeout
        self._alive_for = timeout * _ALIVE_FRACTION
        self._probe_every = timeout * _PROBE_FRACTION
        self._alive_until = time.monotonic() + self._alive_for
        self._stopping = threading.Event()
        self._prober: threading.Thread | None = None

    def start(self) -> None:
        """Watch the session from now on, and gate dispatch on recent proof that it lives."""
        self._watcher = self._zk.watch_session(self._on_event)
        self.metrics.session("connected")
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
        session has expired, and its lease or lock with it (kazoo says LOST on reconnect)."""
        client = self._zk.client
        changed = threading.Event()

        def listener(_state: str) -> bool:
            changed.set()
            return False

        client.add_listener(listener)
        try:
            deadline = time.monotonic() + self._zk.session_timeout
            while client.state == KazooState.SUSPENDED and not self.lost:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                changed.wait(remaining)
                changed.clear()
        finally:
            client.remove_listener(listener)
        if self.lost or client.state != KazooState.CONNECTED:
            return False
        log.info("ZooKeeper connection back within the session: committing")
        with self._lock:
            self._flags = self._flags._replace(suspended=False)  # RESUMED follows via the inbox
        return True

    def live(self) -> bool:
        """Whether a round trip to ZooKeeper succeeded recently enough to trust the session."""
        return time.monotonic() < self._alive_until

    def _probe(self) -> None:
        """A cheap ZooKeeper read every ``session_timeout / 5``; each success extends the
        window in which this member may start handlers, and reopens dispatch if a stall had
        closed it."""
        client = self._zk.client
        while not self._stopping.wait(self._probe_every):
            sent = time.monotonic()
            try:
                client.exists("/")
            except Exception:
                continue  # no proof this time; the session events say what happened
            with self._lock:  # check and reopen in one step against the watcher's pause
                was_live = sent < self._alive_until
                self._alive_until = sent + self._alive_for
                if not was_live and not (self.suspended or self.lost):
                    log.info("ZooKeeper answers again: dispatch resumed")
                    self._ctx.dispatcher.resume_dispatch()

    def _on_event(self, event: SessionEvent) -> None:
        """On the session watcher's thread: act at once where it must, post the rest."""
        state = event.state
        if state in (SessionState.SUSPENDED, SessionState.LOST):
            # Flag first, on this thread: the liveness prober must not reopen dispatch before
            # the poll thread has handled the event.
            with self._lock:
                flags = self._flags
                self._flags = _Flags(
                    flags.suspended or state is SessionState.SUSPENDED,
                    flags.lost or state is SessionState.LOST,
                )
                self._ctx.dispatcher.pause_dispatch()
        self._ctx.inbox.post(lambda: self._apply(state))

    def _apply(self, state: SessionState) -> None:
        if state is SessionState.SUSPENDED:
            with self._lock:
                self._flags = self._flags._replace(suspended=True)
            self.metrics.session("suspended")
            log.warning("ZooKeeper connection lost: dispatch paused until it is back")
        elif state is SessionState.RESUMED:
            with self._lock:
                self._flags = self._flags._replace(suspended=False)
                if self._flags.lost:
                    return  # a LOST flagged meanwhile is next in the inbox: it fences first
                self._ctx.dispatcher.resume_dispatch()
            self.metrics.session("connected")
            log.info("ZooKeeper connection back within the session: dispatch resumed")
        elif state is SessionState.LOST:
            with self._lock:
                self._flags = _Flags(suspended=False, lost=True)
            self.metrics.session("lost")
            self.metrics.fenced()
            log.error("ZooKeeper session expired: fencing, in-flight results are discarded")
            self._on_lost()
            self._ctx.dispatcher.resume_dispatch()  # what was held belonged to the dropped work
        elif state is SessionState.RENEWED:
            with self._lock:
                self._flags = _Flags()
            self.metrics.session("connected")
            log.info("new ZooKeeper session: rejoining")
            self._ctx.dispatcher.resume_dispatch()
            self._on_renewed()

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
