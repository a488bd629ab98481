"""What a mode integration uses of the ZooKeeper coordinator: its kazoo client and recipes.

The integrations (``key_shared``, partition leases, ``exclusive``) receive this protocol, not
:class:`coordinator.ZooKeeperCoordinator` itself, so the coordinator's modules (kazoo-style
recipes) never depend on the code that plugs them into a consumer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kazoo.client import KazooClient

from coordinator.assignment import AssignmentChange, AssignmentSnapshot, AssignmentWatch
from coordinator.cursors import CursorWriter
from coordinator.exclusive import ExclusiveLock
from coordinator.layout import GroupLayout
from coordinator.leader import AssignmentLeader
from coordinator.leases import Lease, PartitionLeases, RangeLeases
from coordinator.members import MemberInfo, Membership
from coordinator.session import SessionEvent, SessionWatcher

__all__ = ["Recipes"]


class Recipes(Protocol):
    """The coordinator's connection and recipe factories, bound to its namespace and ACLs."""

    session_timeout: float

    @property
    def client(self) -> KazooClient: ...

    def start(self) -> object: ...

    def layout(self, group: str) -> GroupLayout: ...

    def watch_session(self, on_event: Callable[[SessionEvent], None]) -> SessionWatcher: ...

    def join(self, group: str, info: MemberInfo) -> Membership: ...

    def leader(
        self,
        group: str,
        member_id: str,
        on_written: Callable[[AssignmentSnapshot], None] | None = None,
    ) -> AssignmentLeader: ...

    def watch_assignment(
        self, group: str, member_id: str, on_change: Callable[[AssignmentChange], None]
    ) -> AssignmentWatch: ...

    def range_leases(self, group: str, member_id: str) -> RangeLeases: ...

    def partition_leases(self, group: str, member_id: str) -> PartitionLeases: ...

    def cursor_writer(self, group: str, lease: Lease) -> CursorWriter: ...

    def exclusive(self, group: str, member_id: str) -> ExclusiveLock: ...

    def close(self) -> None: ...
