"""A ``key_shared`` group as ``keyshared status --zookeeper`` shows it: ranges, drains, cursors.

Built from the coordinator's read model (``coordinator.status.GroupStatus``) and the broker's
high watermarks, so it needs no running member: who owns which slot range by the plan, who holds
its lease now, which hand-overs are still draining and whom they wait for, and where each range
stands in each partition (its resume point, the latest holder's cursor per slot, and the lag
behind the end of the partition). Pure: no I/O here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from keyshared.core.claims import PartitionClaims
from keyshared.core.types import TP
from keyshared.modes.range_cursors import stored_cursors

if TYPE_CHECKING:
    from coordinator.status import GroupStatus as CoordinatorStatus

__all__ = ["KeySharedView", "RangeView", "key_shared_view", "render_key_shared"]


@dataclass(frozen=True)
class RangePosition:
    """Where one range stands in one partition."""

    topic: str
    partition: int
    resume_at: int | None  # None: no cursor yet for some of its slots (starts at the group's)
    lag: int | None


@dataclass(frozen=True)
class RangeView:
    """One range of the plan.

    :param draining: the owner does not hold the lease yet: a previous holder still drains.
    :param waits_for: members whose overlapping lease the owner waits for.
    """

    slots: str
    size: int
    owner: str
    lease_holders: tuple[str, ...]
    draining: bool
    waits_for: tuple[str, ...]
    positions: tuple[RangePosition, ...]


@dataclass(frozen=True)
class KeySharedView:
    group: str
    generation: int
    leader: str | None
    members: dict[str, dict[str, Any]]
    ranges: tuple[RangeView, ...]
    pins: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def key_shared_view(status: CoordinatorStatus, high_watermarks: dict[TP, int]) -> KeySharedView:
    """The view of ``status``; ``high_watermarks`` gives each partition's end, for the lag."""
    stored = stored_cursors(status.cursors)
    partitions = sorted(set(stored) | set(high_watermarks))
    ranges = []
    for planned in status.ranges:
        positions = []
        for tp in partitions:
            claims = PartitionClaims.resolve([(planned.slots, 0)], stored.get(tp, []), base=-1)
            start = claims.start
            known = start is not None and start >= 0
            high = high_watermarks.get(tp)
            positions.append(
                RangePosition(
                    tp[0],
                    tp[1],
                    start if known else None,
                    max(0, high - start)
                    if known and high is not None and start is not None
                    else None,
                )
            )
        waits_for = tuple(
            sorted(
                {
                    lease.member_id
                    for lease in status.leases
                    if lease.held
                    and lease.member_id != planned.owner
                    and lease.slots_overlap(planned.slots)
                }
            )
        )
        ranges.append(
            RangeView(
                str(planned.slots),
                planned.slots.hi - planned.slots.lo + 1,
                planned.owner,
                planned.lease_holders,
                planned.draining or planned.owner not in planned.lease_holders,
                waits_for,
                tuple(positions),
            )
        )
    members = {
        member_id: {"host": info.host, "pid": info.pid, "mode": info.mode, "topics": info.topics}
        for member_id, info in sorted(status.members.items())
    }
    pins = {str(slots): member for slots, member in sorted(status.pins.items())}
    return KeySharedView(
        status.group, status.generation, status.leader, members, tuple(ranges), pins
    )


def render_key_shared(console: Console, view: KeySharedView) -> None:
    """The key_shared section of ``keyshared status``."""
    if not view.ranges:
        return
    console.print(
        f"key_shared: generation {view.generation}, leader {view.leader or 'none'}, "
        f"{len(view.members)} member(s): "
        + ", ".join(f"{m} ({i['host']}:{i['pid']})" for m, i in view.members.items())
    )
    table = Table("Slots", "Size", "Owner", "Lease", "Where it stands", title="Slot ranges")
    for r in view.ranges:
        if r.draining:
            lease = (
                f"[yellow]draining[/]: waits for {', '.join(r.waits_for)}"
                if r.waits_for
                else "[yellow]acquiring[/]"
            )
        else:
            lease = "held"
        where = "; ".join(
            f"{p.topic}[{p.partition}]@{p.resume_at} lag {p.lag}"
            if p.resume_at is not None
            else f"{p.topic}[{p.partition}]: from the group's offset"
            for p in r.positions
        )
        pinned = " (pinned)" if r.slots in view.pins else ""
        table.add_row(r.slots, f"{r.size:,}", r.owner + pinned, lease, where)
    console.print(table)
