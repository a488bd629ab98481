"""Kafka commits that carry a partition lease: refused once the lease znode is gone.

The cursor store of ``partition`` mode with the coordinator (see
:mod:`keyshared.modes.partition_leases`). Before a commit reaches Kafka, one ``get_children``
of the lease directory says which of this member's leases still exist; a partition whose lease
is gone (released by an operator, or taken with an expired session) is fenced: its commit is
refused, counted, and the member is told so it stops the partition.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from coordinator.leases import Lease
from keyshared.core.types import TP
from keyshared.kafka.commits import Committer
from keyshared.modes.session_gate import SessionGate

if TYPE_CHECKING:
    from keyshared.runtime.partition import PartitionState

__all__ = ["LeasedCommits"]

log = logging.getLogger(__name__)


class LeasedCommits:
    """A :class:`~keyshared.kafka.commits.Committer` guarded by partition leases.

    :param client: the kazoo client of the session that holds the leases.
    :param directory: the group's partition-lease directory.
    :param gate: the session gate: nothing is committed while the session is in doubt.
    :param held: this member's granted leases (kept up to date by the member).
    :param on_gone: told, on the poll thread, of each lease found gone.
    """

    def __init__(
        self,
        client: KazooClient,
        directory: str,
        gate: SessionGate,
        held: Mapping[TP, Lease],
        on_gone: Callable[[TP, Lease], None],
    ) -> None:
        self._client = client
        self._directory = directory
        self._gate = gate
        self._held = held
        self._on_gone = on_gone
        self._committer: Committer | None = None
        self.starts: dict[TP, tuple[int | None, str]] = {}  # read at a grant, for assigned()

    def bind(self, committer: Committer) -> None:
        """The Kafka committer (built at join, once the consumer and its states exist)."""
        self._committer = committer

    @property
    def committer(self) -> Committer:
        assert self._committer is not None, "bind() a committer first"
        return self._committer

    def starting_points(
        self, partitions: list[TP], timeout: float
    ) -> dict[TP, tuple[int | None, str]]:
        missing = [tp for tp in partitions if tp not in self.starts]
        found = {tp: self.starts[tp] for tp in partitions if tp in self.starts}
        if missing:
            found.update(self.committer.starting_points(missing, timeout))
        return found

    def leaving(self, partitions: list[TP]) -> None:
        self.committer.leaving(partitions)

    def commit_async(self, states: Iterable[PartitionState]) -> None:
        allowed = self._leased(list(states))
        if allowed:
            self.committer.commit_async(allowed)

    def commit_sync(self, states: Iterable[PartitionState]) -> bool:
        """The final commit before a partition changes hands. While the connection is down it
        waits for it (bounded by the session timeout): refused, it would hand the next owner
        every record finished since the last commit."""
        states = list(states)
        if states and self._gate.suspended:
            self._gate.await_connection()
        allowed = self._leased(states)
        ok = self.committer.commit_sync(allowed) if allowed else True
        return ok and len(allowed) == len(states)

    def _leased(self, states: list[PartitionState]) -> list[PartitionState]:
        """The states whose lease znode still exists; the others are fenced (refused)."""
        if not states:
            return []
        if self._gate.suspended or self._gate.lost:
            return []  # the session may be gone: a commit now could not be trusted
        try:
            present = set(self._client.get_children(self._directory))
        except KazooException as exc:
            log.warning("checking partition leases before a commit failed: %s", exc)
            return []
        allowed: list[PartitionState] = []
        for state in states:
            lease = self._held.get(state.tp)
            if lease is not None and lease.path.rsplit("/", 1)[1] in present:
                allowed.append(state)
                continue
            self._gate.metrics.fenced()
            log.error("%s: lease gone; its commit is refused (fenced)", state)
            if lease is not None:
                self._on_gone(state.tp, lease)
        return allowed
