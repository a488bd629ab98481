"""The ZooKeeper session: a bounded connect, optional digest auth, and session-state events.

Everything the coordinator guarantees hangs on one ZooKeeper session: ephemeral member and lease
znodes live exactly as long as it does. So the consumer must react to its states:

- ``SUSPENDED``: the connection dropped; the session may still be alive on the server. Pause
  dispatching (nothing new starts), keep in-flight work, do not write cursors.
- ``RESUMED``: reconnected within the same session; every lease is still held. Resume.
- ``LOST``: the session expired; every ephemeral znode of this member is gone and other members
  may already own its ranges. Fence everything: stop all ranges, drop their in-flight results
  without committing. A ``RENEWED`` event follows when a new session is up; the member then
  rejoins and acquires leases afresh, as if it had just started.

kazoo reports states on its connection thread, where a listener must not block or call
ZooKeeper; :class:`SessionWatcher` hands each state to its own thread before calling back.
"""

from __future__ import annotations

import enum
import logging
import math
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import ACL, READ_ACL_UNSAFE, make_digest_acl

from coordinator.errors import CoordinatorUnreachable

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_SESSION_TIMEOUT",
    "SessionEvent",
    "SessionState",
    "SessionWatcher",
    "connect",
    "group_acl",
    "handshake_hosts",
    "reconnect_retry",
]

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT = 10.0
"""Seconds a member may be silent before ZooKeeper expires it and its ranges move: long enough
to ride out a GC pause or a ZooKeeper leader election, short enough that a crashed member's
ranges are drained by its session's end within seconds."""

DEFAULT_CONNECT_TIMEOUT = 15.0
"""Seconds to wait for the first connection before :class:`CoordinatorUnreachable`."""


RECONNECT_SHARE = 0.25
"""The longest pause between two reconnection attempts, as a share of the session timeout
(before kazoo's jitter of up to 40 %)."""


def reconnect_retry(session_timeout: float) -> KazooRetry:
    """How a member reconnects after its ZooKeeper connection dropped.

    kazoo's default backs off exponentially up to an hour between attempts. After a server
    restart or a leader election of a couple of seconds, its next attempt can come later than
    the session timeout, so the server expires the session of a member that did nothing wrong:
    its leases go, its ranges move, its in-flight work is fenced. Capped at
    :data:`RECONNECT_SHARE` of the timeout (at most 0.35 of it with jitter), the member tries
    again often enough to be back within its session once a server answers. The cost, while no
    server answers, is one connection attempt per member every quarter session timeout.
    """
    return KazooRetry(
        max_tries=-1, delay=0.1, backoff=2, max_delay=session_timeout * RECONNECT_SHARE
    )


HANDSHAKE_SHARE = 0.25
"""The longest wait for a server's answer to one connection attempt, as a share of the
session timeout (at most: with more servers than ``1 / HANDSHAKE_SHARE`` it is shorter)."""


def handshake_hosts(hosts: str) -> str:
    """``hosts`` with each server listed often enough that kazoo waits at most
    :data:`HANDSHAKE_SHARE` of the session timeout for a server's answer to a connection.

    kazoo waits ``session timeout / number of hosts`` for that answer: with one server, the
    whole session. A server restarting under load may take a connection and never answer it;
    the member then learns nothing until its session is over, and the server, back meanwhile,
    expires it (a chaos run in CI: a 4 s handshake against a 4 s session). Listed four times,
    the one server is tried again after a second of silence, within the session. The chroot
    (after the first ``/``) is kept once, at the end.
    """
    servers, slash, chroot = hosts.partition("/")
    listed = [server.strip() for server in servers.split(",") if server.strip()]
    if not listed:
        return hosts  # kazoo names the problem
    copies = math.ceil(1 / HANDSHAKE_SHARE / len(listed))
    return ",".join(listed * copies) + slash + chroot


def group_acl(auth: tuple[str, str] | None) -> list[ACL] | None:
    """The ACL for a group's znodes: all rights for the digest user, read for everyone.

    Read stays open so ``keyshared status`` works without credentials; changing a lease, the
    assignment, a cursor or a pin needs them. ``None`` without ``auth`` (ZooKeeper's open ACL).
    """
    if auth is None:
        return None
    user, password = auth
    return [make_digest_acl(user, password, all=True), *READ_ACL_UNSAFE]


def connect(
    hosts: str,
    *,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    auth: tuple[str, str] | None = None,
) -> KazooClient:
    """Start a kazoo client, or fail with :class:`CoordinatorUnreachable` after ``connect_timeout``.

    :param hosts: ZooKeeper connection string, ``host:port[,host:port...]``.
    :param session_timeout: requested session timeout in seconds (the server clamps it to its
        ``minSessionTimeout..maxSessionTimeout``).
    :param connect_timeout: bound on the first connection, in seconds.
    :param auth: ``(user, password)`` for digest auth; the client then creates znodes with
        :func:`group_acl` by default.
    :raises CoordinatorUnreachable: when no server answered in time.
    """
    acl = group_acl(auth)
    client = KazooClient(
        hosts=handshake_hosts(hosts),
        timeout=session_timeout,
        connection_retry=reconnect_retry(session_timeout),
        auth_data=[("digest", f"{auth[0]}:{auth[1]}")] if auth else None,
        default_acl=acl,
    )
    try:
        client.start(timeout=connect_timeout)
    except KazooTimeoutError:
        raise CoordinatorUnreachable(hosts, connect_timeout) from None
    return client


class SessionState(enum.Enum):
    """What happened to the session, as the consumer acts on it (see the module docstring)."""

    SUSPENDED = "suspended"
    RESUMED = "resumed"
    LOST = "lost"
    RENEWED = "renewed"


@dataclass(frozen=True)
class SessionEvent:
    """One session state change.

    :param state: the new state.
    :param session_id: the ZooKeeper session id when the event was handled (``None`` if the
        client has none at that moment); a ``RENEWED`` event carries the new session's id.
    """

    state: SessionState
    session_id: int | None


class SessionWatcher:
    """Calls back on session state changes, from its own thread, in the order they happened.

    Example::

        watcher = SessionWatcher(client, lambda event: print(event.state))
        ...
        watcher.stop()

    :param client: a started kazoo client.
    :param on_event: called with each :class:`SessionEvent`; may block or use ZooKeeper, as it
        runs on the watcher's thread, not kazoo's.
    """

    _STOP = object()

    def __init__(self, client: KazooClient, on_event: Callable[[SessionEvent], None]) -> None:
        self._client = client
        self._on_event = on_event
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._lost = False
        self._thread = threading.Thread(target=self._run, name="keyshared-zk-session", daemon=True)
        self._thread.start()
        client.add_listener(self._listener)

    def _listener(self, state: str) -> bool:
        """kazoo's listener: translate and enqueue, never block (kazoo's thread)."""
        if state == KazooState.SUSPENDED:
            self._queue.put(SessionState.SUSPENDED)
        elif state == KazooState.LOST:
            self._lost = True
            self._queue.put(SessionState.LOST)
        elif state == KazooState.CONNECTED:
            renewed, self._lost = self._lost, False
            self._queue.put(SessionState.RENEWED if renewed else SessionState.RESUMED)
        return False

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            assert isinstance(item, SessionState)
            client_id = self._client.client_id
            event = SessionEvent(item, client_id[0] if client_id else None)
            log.info("ZooKeeper session %s (session id %s)", item.value, event.session_id)
            try:
                self._on_event(event)
            except Exception:
                log.exception("session event callback failed on %s", item.value)

    def stop(self) -> None:
        """Stop listening and end the thread (pending events are still delivered first)."""
        self._client.remove_listener(self._listener)
        self._queue.put(self._STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()
