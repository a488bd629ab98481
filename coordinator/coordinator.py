"""The façade a consumer receives as ``coordinator=``: one ZooKeeper session, and the recipes.

It owns the kazoo client (connect with a bound, auth, ACLs, close) and builds each recipe for a
group and member on that client. It holds no consumer logic: what to do on a gained range, a
lost session or a fenced write is the consumer's, which calls the recipes below (the flow is in
``docs/coordinator.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType

from kazoo.client import KazooClient

from coordinator.assignment import AssignmentChange, AssignmentSnapshot, AssignmentWatch
from coordinator.cursors import Cursor, CursorWriter, start_positions
from coordinator.exclusive import ExclusiveLock
from coordinator.layout import DEFAULT_NAMESPACE, GroupLayout
from coordinator.leader import AssignmentLeader
from coordinator.leases import Lease, PartitionLeases, RangeLeases
from coordinator.members import MemberInfo, Membership
from coordinator.pins import Pins
from coordinator.session import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_SESSION_TIMEOUT,
    SessionEvent,
    SessionWatcher,
    connect,
    group_acl,
)
from coordinator.status import GroupStatus, read_status
from keyshared.core.slots import SlotRange
from keyshared.errors import ConfigurationError

__all__ = ["ZooKeeperCoordinator"]

log = logging.getLogger(__name__)


class ZooKeeperCoordinator:
    """ZooKeeper coordination for keyshared consumers.

    Example::

        with ZooKeeperCoordinator("127.0.0.1:2181", auth=("orders", "s3cret")) as zk:
            zk.join("orders", MemberInfo("worker-1", topics=("payments",)))
            zk.leader("orders", "worker-1").start()
            zk.watch_assignment("orders", "worker-1", print)

    :param hosts: ZooKeeper connection string, ``host:port[,host:port...]``.
    :param namespace: root znode of everything keyshared writes.
    :param session_timeout: seconds; how long a silent member keeps its ranges.
    :param connect_timeout: seconds to wait for the first connection.
    :param auth: ``(user, password)``: digest auth, and the group's znodes get an ACL that lets
        only these credentials change them (everyone may read).
    """

    def __init__(
        self,
        hosts: str,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        auth: tuple[str, str] | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        if not hosts.strip():
            raise ConfigurationError("hosts", "a ZooKeeper connection string is required")
        if session_timeout <= 0 or connect_timeout <= 0:
            raise ConfigurationError("session_timeout/connect_timeout", "must be positive")
        if auth is not None and (len(auth) != 2 or not all(auth)):
            raise ConfigurationError("auth", "expected (user, password), both non-empty")
        self.hosts = hosts
        self.namespace = namespace
        self.session_timeout = session_timeout
        self.connect_timeout = connect_timeout
        self._auth = auth
        self._client: KazooClient | None = None
        self._stoppers: list[Callable[[], None]] = []
        self._ensured: set[str] = set()

    def start(self) -> ZooKeeperCoordinator:
        """Connect (idempotent).

        :raises CoordinatorUnreachable: no server answered within ``connect_timeout``.
        """
        if self._client is None:
            self._client = connect(
                self.hosts,
                session_timeout=self.session_timeout,
                connect_timeout=self.connect_timeout,
                auth=self._auth,
            )
        return self

    @property
    def client(self) -> KazooClient:
        """The kazoo client (started)."""
        if self._client is None:
            raise RuntimeError("ZooKeeperCoordinator.start() has not been called")
        return self._client

    def layout(self, group: str) -> GroupLayout:
        """The group's paths, its directories created on first use."""
        layout = GroupLayout(group, self.namespace)
        if group not in self._ensured:
            layout.ensure(self.client, group_acl(self._auth))
            self._ensured.add(group)
        return layout

    def _track(self, stop: Callable[[], None]) -> None:
        self._stoppers.append(stop)

    def watch_session(self, on_event: Callable[[SessionEvent], None]) -> SessionWatcher:
        """Session SUSPENDED / RESUMED / LOST / RENEWED callbacks (see :mod:`.session`)."""
        watcher = SessionWatcher(self.client, on_event)
        self._track(watcher.stop)
        return watcher

    def join(self, group: str, info: MemberInfo) -> Membership:
        """Register this member (ephemeral znode) and return its handle.

        :raises MemberIdInUse: another live process has the id (after one session timeout:
            a restarted process's predecessor may still be expiring).
        """
        membership = Membership(self.client, self.layout(group), info)
        membership.join(wait=self.session_timeout)
        return membership

    def leader(
        self,
        group: str,
        member_id: str,
        on_written: Callable[[AssignmentSnapshot], None] | None = None,
    ) -> AssignmentLeader:
        """This member's candidacy for planning the group (call ``start()`` on it)."""
        leader = AssignmentLeader(self.client, self.layout(group), member_id, on_written)
        self._track(leader.stop)
        return leader

    def watch_assignment(
        self, group: str, member_id: str, on_change: Callable[[AssignmentChange], None]
    ) -> AssignmentWatch:
        watch = AssignmentWatch(self.client, self.layout(group), member_id, on_change)
        self._track(watch.stop)
        return watch

    def range_leases(self, group: str, member_id: str) -> RangeLeases:
        return RangeLeases(self.client, self.layout(group), member_id)

    def partition_leases(self, group: str, member_id: str) -> PartitionLeases:
        return PartitionLeases(self.client, self.layout(group), member_id)

    def cursor_writer(self, group: str, lease: Lease) -> CursorWriter:
        return CursorWriter(self.client, self.layout(group), lease)

    def start_positions(self, group: str, slots: SlotRange) -> dict[tuple[str, int], Cursor]:
        return start_positions(self.client, self.layout(group), slots)

    def pins(self, group: str) -> Pins:
        return Pins(self.client, self.layout(group))

    def exclusive(self, group: str, member_id: str) -> ExclusiveLock:
        return ExclusiveLock(self.client, self.layout(group), member_id)

    def status(self, group: str) -> GroupStatus:
        """The group's state (pure read; does not create the group)."""
        return read_status(self.client, GroupLayout(group, self.namespace))

    def close(self) -> None:
        """Stop every watch and candidacy, then end the session (its ephemerals go at once)."""
        for stop in reversed(self._stoppers):
            try:
                stop()
            except Exception:
                log.warning("stopping a coordinator recipe failed", exc_info=True)
        self._stoppers.clear()
        if self._client is not None:
            self._client.stop()
            self._client.close()
            self._client = None

    def __enter__(self) -> ZooKeeperCoordinator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
