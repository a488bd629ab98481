"""What the ZooKeeper coordinator says about a group, for ``keyshared status --zookeeper``.

Partition leases (``partition`` mode: who holds each partition, who waits for it), the active
member and its standbys (``exclusive`` mode), the slot ranges of a ``key_shared`` group
(:mod:`keyshared.ops.key_shared_view`), and the live members. A separate module from the
broker-side report so the two can grow apart. Pure reads, no watches: reading never changes
the group.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kazoo.recipe.lock import Lock
from rich.console import Console
from rich.table import Table

from coordinator.layout import DEFAULT_NAMESPACE, GroupLayout, parse_partition
from keyshared.ops.key_shared_view import KeySharedView, key_shared_view, render_key_shared

__all__ = ["CoordinatorView", "PartitionLeaseView", "read_coordinator_view", "render_coordinator"]


@dataclass(frozen=True)
class PartitionLeaseView:
    """One partition lease znode: granted (``held``) or queued behind an earlier one."""

    topic: str
    partition: int
    member: str
    token: int
    generation: int
    held: bool


@dataclass(frozen=True)
class CoordinatorView:
    """The coordinator's side of a group, as read just now.

    :param exists: False when ZooKeeper has nothing for the group (no coordinated member ever).
    :param active: ``exclusive`` mode's active member (the lowest lock contender), or None.
    :param standbys: the other contenders, in the order they would take over.
    """

    group: str
    hosts: str
    exists: bool
    members: tuple[str, ...]
    partition_leases: tuple[PartitionLeaseView, ...]
    active: str | None
    standbys: tuple[str, ...]
    key_shared: KeySharedView | None = None  # slot ranges, when the group runs key_shared

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_coordinator_view(
    hosts: str,
    group: str,
    *,
    timeout: float,
    namespace: str = DEFAULT_NAMESPACE,
    high_watermarks: dict[tuple[str, int], int] | None = None,
) -> CoordinatorView:
    """Connect (bounded by ``timeout``), read, disconnect.

    :raises coordinator.errors.CoordinatorUnreachable: no ZooKeeper answered in time.
    """
    from coordinator.coordinator import ZooKeeperCoordinator

    with ZooKeeperCoordinator(hosts, namespace=namespace, connect_timeout=timeout) as zk:
        status = zk.status(group)
        if not status.exists:
            return CoordinatorView(group, hosts, False, (), (), None, ())
        layout = GroupLayout(group, namespace)
        contenders = [str(c) for c in Lock(zk.client, layout.active).contenders()]
        leases = []
        for lease in status.partition_leases:
            topic, partition = parse_partition(lease.key)
            leases.append(
                PartitionLeaseView(
                    topic, partition, lease.member_id, lease.token, lease.generation, lease.held
                )
            )
        leases.sort(key=lambda v: (v.topic, v.partition, v.token))
        return CoordinatorView(
            group,
            hosts,
            True,
            tuple(sorted(status.members)),
            tuple(leases),
            contenders[0] if contenders else None,
            tuple(contenders[1:]),
            key_shared_view(status, high_watermarks or {}) if status.ranges else None,
        )


def render_coordinator(console: Console, view: CoordinatorView) -> None:
    """The coordinator's section of ``keyshared status``."""
    if not view.exists:
        console.print(f"Coordinator ({view.hosts}): nothing stored for group {view.group!r}")
        return
    if view.key_shared is not None:
        render_key_shared(console, view.key_shared)
    if view.active is not None:
        standbys = ", ".join(view.standbys) or "none"
        console.print(
            f"Coordinator ({view.hosts}): active member [bold]{view.active}[/], "
            f"standbys: {standbys}"
        )
    else:
        console.print(f"Coordinator ({view.hosts}): members {', '.join(view.members) or 'none'}")
    if not view.partition_leases:
        return
    table = Table("Topic", "Part", "Member", "Token", "State", title="Partition leases")
    for lease in view.partition_leases:
        state = "held" if lease.held else "[yellow]waiting[/] (previous owner draining)"
        table.add_row(lease.topic, str(lease.partition), lease.member, str(lease.token), state)
    console.print(table)
