"""ZooKeeper coordination for keyshared: membership, leader and assignment, leases and the
mandatory drain, fenced cursors, pins, exclusive mode, and a status read model.

One module per recipe, each a small class that takes a kazoo client first (the model is kazoo's
own recipes); :class:`ZooKeeperCoordinator` owns the client and builds them. The znode layout,
the drain protocol and the consumer's integration are in ``docs/coordinator.md``.
"""

from coordinator.assignment import AssignmentChange, AssignmentSnapshot, AssignmentWatch
from coordinator.coordinator import ZooKeeperCoordinator
from coordinator.cursors import (
    Cursor,
    CursorFlush,
    CursorWriter,
    flush_together,
    read_cursors,
    start_positions,
)
from coordinator.errors import (
    AcquireCancelled,
    CoordinatorError,
    CoordinatorUnreachable,
    Fenced,
    LeaseTimeout,
    MemberIdInUse,
    NotLeader,
    PinConflict,
)
from coordinator.exclusive import ExclusiveLock
from coordinator.layout import DEFAULT_NAMESPACE, GroupLayout
from coordinator.leader import AssignmentLeader
from coordinator.leases import Lease, LeaseInfo, PartitionLeases, PendingLease, RangeLeases
from coordinator.members import MemberInfo, Membership, MembersWatch
from coordinator.pins import Pins
from coordinator.session import SessionEvent, SessionState, SessionWatcher, connect
from coordinator.status import GroupStatus, RangeStatus, read_status

__all__ = [
    "DEFAULT_NAMESPACE",
    "AcquireCancelled",
    "AssignmentChange",
    "AssignmentLeader",
    "AssignmentSnapshot",
    "AssignmentWatch",
    "CoordinatorError",
    "CoordinatorUnreachable",
    "Cursor",
    "CursorFlush",
    "CursorWriter",
    "ExclusiveLock",
    "Fenced",
    "GroupLayout",
    "GroupStatus",
    "Lease",
    "LeaseInfo",
    "LeaseTimeout",
    "MemberIdInUse",
    "MemberInfo",
    "MembersWatch",
    "Membership",
    "NotLeader",
    "PartitionLeases",
    "PendingLease",
    "PinConflict",
    "Pins",
    "RangeLeases",
    "RangeStatus",
    "SessionEvent",
    "SessionState",
    "SessionWatcher",
    "ZooKeeperCoordinator",
    "connect",
    "flush_together",
    "read_cursors",
    "read_status",
    "start_positions",
]
