"""Errors raised by the coordinator, each named for what went wrong.

They derive from :class:`keyshared.errors.KeySharedError` so a caller can catch every keyshared
failure in one place, and carry the znode path, range or hosts involved so the message alone
tells an operator where to look.
"""

from __future__ import annotations

from keyshared.errors import KeySharedError, UnreachableError

__all__ = [
    "AcquireCancelled",
    "CoordinatorError",
    "CoordinatorUnreachable",
    "Fenced",
    "LeaseTimeout",
    "MemberIdInUse",
    "NotLeader",
    "PinConflict",
]


class CoordinatorError(KeySharedError):
    """Base class of the coordinator's errors."""


class CoordinatorUnreachable(CoordinatorError, UnreachableError):
    """No ZooKeeper server answered within the connect timeout.

    :param hosts: the connection string that was tried.
    :param timeout: the bound, in seconds, that ran out.
    """

    def __init__(self, hosts: str, timeout: float) -> None:
        super().__init__(
            f"ZooKeeper at {hosts!r} did not answer within {timeout:g} s "
            "(is it running, and is the host:port right?)"
        )
        self.hosts = hosts
        self.timeout = timeout


class Fenced(CoordinatorError):
    """A write was refused because the writer no longer holds the lease it relies on.

    The lease znode is gone (released, or deleted with an expired session) or was re-created by
    another acquisition. The writer is a zombie for that range or partition: it must stop
    dispatching it and drop what it holds there; the new owner resumes from the last cursor.

    :param lease_path: the lease znode the write was conditional on.
    """

    def __init__(self, lease_path: str, what: str) -> None:
        super().__init__(f"fenced: lease {lease_path} is no longer held, refused to {what}")
        self.lease_path = lease_path


class LeaseTimeout(CoordinatorError, TimeoutError):
    """``acquire`` waited its whole timeout for other owners' leases to go (their drain).

    :param lease: the lease name that was being acquired.
    :param blockers: the lease znodes still in the way when the time ran out.
    """

    def __init__(self, lease: str, timeout: float, blockers: list[str]) -> None:
        super().__init__(
            f"lease {lease} not acquired within {timeout:g} s; still held: {', '.join(blockers)}"
        )
        self.lease = lease
        self.blockers = blockers


class AcquireCancelled(CoordinatorError):
    """A blocking acquire (lease or exclusive lock) was cancelled, e.g. for shutdown."""


class NotLeader(CoordinatorError):
    """An assignment write was refused: this member is not (or no longer) the group's leader,
    or another leader wrote the assignment since it was read (compare-and-set failed)."""


class PinConflict(CoordinatorError, ValueError):
    """An operator pin overlaps another pin of the group; pins must be disjoint."""


class MemberIdInUse(CoordinatorError):
    """Another live process of the group has this member id (two processes started with the
    same ``client.id``): it would take this member's ranges or partition leases for its own.

    :param member_id: the id in use.
    :param group: the consumer group.
    :param holder: what the other process says about itself (host and pid), if readable.
    """

    def __init__(self, member_id: str, group: str, holder: str, waited: float) -> None:
        super().__init__(
            f"member id {member_id!r} is already in use in group {group!r} by another live "
            f"process ({holder}; still there after {waited:g} s, one session timeout): give "
            "every process its own client.id"
        )
        self.member_id = member_id
        self.group = group
