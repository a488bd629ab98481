"""A read model of a group's coordination state, for ``keyshared status`` and for tests.

Pure reads, no watches, no writes: members, the leader, the assignment with its generation,
leases (granted or queued, with their tokens), pins and cursors, as typed dataclasses. The reads
are not one atomic snapshot (ZooKeeper has none across znodes); each part is consistent in
itself, and a change between parts shows on the next read.
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.election import Election
from kazoo.recipe.lock import Lock

from coordinator.assignment import read_assignment
from coordinator.cursors import Cursor, read_cursors
from coordinator.layout import GroupLayout
from coordinator.leases import LeaseInfo, read_leases, same_partition
from coordinator.members import MemberInfo, read_members
from coordinator.pins import read_pins
from keyshared.core.slots import SlotRange

__all__ = ["GroupStatus", "RangeStatus", "read_status"]


@dataclass(frozen=True)
class RangeStatus:
    """One assigned range: its owner by the plan, and who holds its lease now.

    ``lease_holders`` differs from ``[owner]`` while a hand-over drains (the previous owner still
    holds an overlapping lease) or before the owner has acquired.
    """

    slots: SlotRange
    owner: str
    lease_holders: tuple[str, ...]

    @property
    def draining(self) -> bool:
        return any(holder != self.owner for holder in self.lease_holders)


@dataclass(frozen=True)
class GroupStatus:
    """Everything the coordinator stores about a group, as read just now."""

    group: str
    exists: bool
    members: dict[str, MemberInfo]
    leader: str | None
    generation: int
    ranges: tuple[RangeStatus, ...]
    leases: tuple[LeaseInfo, ...]
    partition_leases: tuple[LeaseInfo, ...]
    pins: dict[SlotRange, str]
    cursors: tuple[Cursor, ...]
    active: str | None


def read_status(client: KazooClient, layout: GroupLayout) -> GroupStatus:
    """Read a group's state (``exists`` is False, and the rest empty, for an unknown group)."""
    if client.exists(layout.root) is None:
        return GroupStatus(layout.group, False, {}, None, 0, (), (), (), {}, (), None)
    try:
        snapshot = read_assignment(client, layout)
        leases = read_leases(client, layout.leases)
        ranges = tuple(
            RangeStatus(
                slots,
                owner,
                tuple(sorted({i.member_id for i in leases if i.held and i.slots_overlap(slots)})),
            )
            for slots, owner in snapshot.assignment.items()
        )
        leader = Election(client, layout.leader).contenders()
        active = Lock(client, layout.active).contenders()
        return GroupStatus(
            group=layout.group,
            exists=True,
            members=read_members(client, layout),
            leader=leader[0] if leader else None,
            generation=snapshot.generation,
            ranges=ranges,
            leases=tuple(leases),
            partition_leases=tuple(read_leases(client, layout.partition_leases, same_partition)),
            pins=read_pins(client, layout),
            cursors=tuple(read_cursors(client, layout)),
            active=active[0] if active else None,
        )
    except NoNodeError:  # the group was deleted while reading
        return GroupStatus(layout.group, False, {}, None, 0, (), (), (), {}, (), None)
