"""The assignment znode: who owns which slot ranges, per generation, and what each member gains
and loses when it changes.

The leader writes the assignment (:mod:`coordinator.leader`); every member watches it. The
znode holds JSON ``{"generation": n, "leader": id, "ranges": [[lo, hi, owner], ...]}``. Writes are
compare-and-set on the znode version *and* conditional on the writer's election znode, in one
transaction, so only the current leader can write and only on top of what it read; the
generation therefore rises by one per write and never goes back.

A member does not act on the whole map but on its diff against the generation it last saw,
:class:`AssignmentChange`: the slots it must stop dispatching and drain (``lost``), the slots it
may dispatch only after acquiring their lease (``gained``), and the leases to take and release.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, RolledBackError
from kazoo.protocol.states import ZnodeStat

from coordinator._worker import Refresher
from coordinator.errors import NotLeader
from coordinator.layout import GroupLayout
from keyshared.core.slots import SlotMap, SlotRange, subtract

__all__ = [
    "AssignmentChange",
    "AssignmentSnapshot",
    "AssignmentWatch",
    "read_assignment",
    "subtract_ranges",
    "write_assignment",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AssignmentSnapshot:
    """The assignment as read, with the znode version a compare-and-set must match.

    :param generation: 0 before the first plan; +1 per write.
    :param assignment: owner of each range.
    :param leader: the member id of the leader that wrote it (``None`` for generation 0).
    :param version: the znode's data version when read.
    """

    generation: int
    assignment: SlotMap
    leader: str | None
    version: int

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "generation": self.generation,
                "leader": self.leader,
                "ranges": [[r.lo, r.hi, owner] for r, owner in self.assignment.items()],
            }
        ).encode()

    @classmethod
    def from_znode(cls, data: bytes, stat: ZnodeStat) -> AssignmentSnapshot:
        if not data:
            return cls(0, SlotMap(), None, stat.version)
        raw = json.loads(data)
        ranges = SlotMap((SlotRange(lo, hi), str(owner)) for lo, hi, owner in raw["ranges"])
        return cls(int(raw["generation"]), ranges, raw.get("leader"), stat.version)


def read_assignment(client: KazooClient, layout: GroupLayout) -> AssignmentSnapshot:
    """The current assignment (generation 0 and no ranges before the first plan)."""
    try:
        data, stat = client.get(layout.assignment)
    except NoNodeError:
        return AssignmentSnapshot(0, SlotMap(), None, -1)
    return AssignmentSnapshot.from_znode(data, stat)


def write_assignment(
    client: KazooClient,
    layout: GroupLayout,
    assignment: SlotMap,
    *,
    based_on: AssignmentSnapshot,
    leader_id: str,
    leader_node: str,
) -> AssignmentSnapshot:
    """Write ``assignment`` as generation ``based_on.generation + 1``, compare-and-set.

    :param based_on: the snapshot the plan was computed from; the write fails if the znode
        changed since (another leader wrote).
    :param leader_id: recorded in the znode.
    :param leader_node: the full path of the writer's election znode; the write fails if it is
        gone (the writer's session ended, so it is no longer the leader).
    :raises NotLeader: on either failure; nothing was written.
    """
    written = AssignmentSnapshot(based_on.generation + 1, assignment, leader_id, -1)
    transaction = client.transaction()
    transaction.check(leader_node, 0)
    if based_on.version < 0:
        transaction.create(layout.assignment, written.to_json())
    else:
        transaction.set_data(layout.assignment, written.to_json(), version=based_on.version)
    results = transaction.commit()
    failures = [
        r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)
    ]
    if failures:
        reason = (
            "its election znode is gone"
            if not isinstance(results[0], RolledBackError)
            else f"the assignment changed since generation {based_on.generation}"
        )
        raise NotLeader(
            f"{leader_id} may not write generation {written.generation} of group "
            f"{layout.group}: {reason} ({type(failures[0]).__name__})"
        )
    version = 0 if based_on.version < 0 else based_on.version + 1
    return AssignmentSnapshot(written.generation, assignment, leader_id, version)


def subtract_ranges(ranges: Iterable[SlotRange], minus: Iterable[SlotRange]) -> list[SlotRange]:
    """The slots of ``ranges`` not in ``minus``, as maximal ranges in slot order."""
    cut = sorted(minus)
    out: list[SlotRange] = []
    for whole in sorted(ranges):
        out.extend(SlotRange(lo, hi) for lo, hi in subtract(whole.lo, whole.hi, cut))
    return out


@dataclass(frozen=True)
class AssignmentChange:
    """What one member must do when the assignment moves to a new generation.

    :param generation: the generation now in force.
    :param owned: this member's ranges in it, exactly as written (one lease each).
    :param gained: slots newly owned; dispatch none of them before the lease covering them is
        acquired (that waits for the previous owner's drain).
    :param lost: slots no longer owned; stop dispatching them now, drain, write their cursors.
    :param acquire: ranges of ``owned`` not owned in this exact shape before: acquire a lease
        each (immediate where only this member's own leases overlap).
    :param release: previously owned ranges not in ``owned``: release their leases once the
        ``lost`` slots inside them are drained and their cursors written.
    :param assignment: the whole map, for routing and status.
    """

    generation: int
    owned: tuple[SlotRange, ...]
    gained: tuple[SlotRange, ...]
    lost: tuple[SlotRange, ...]
    acquire: tuple[SlotRange, ...]
    release: tuple[SlotRange, ...]
    assignment: SlotMap

    @classmethod
    def between(
        cls, member_id: str, before: SlotMap, after: SlotMap, generation: int
    ) -> AssignmentChange:
        old, new = before.ranges_of(member_id), after.ranges_of(member_id)
        return cls(
            generation=generation,
            owned=tuple(new),
            gained=tuple(subtract_ranges(new, old)),
            lost=tuple(subtract_ranges(old, new)),
            acquire=tuple(r for r in new if r not in old),
            release=tuple(r for r in old if r not in new),
            assignment=after,
        )


class AssignmentWatch:
    """Tells one member, per generation, which ranges it gained and lost.

    The first call describes the current assignment against an empty one (everything owned is
    gained). Generations seen out of order or twice are ignored; a member that misses
    intermediate generations gets the diff from the last one it saw, which is what its leases
    and drains have to catch up with.

    Example::

        def on_change(change: AssignmentChange) -> None:
            print(change.generation, change.gained, change.lost)

        watch = AssignmentWatch(client, GroupLayout("orders"), "worker-1", on_change)
        ...
        watch.stop()

    :param client: a started kazoo client.
    :param layout: the group's paths.
    :param member_id: whose gains and losses to report.
    :param on_change: called on the watch's own thread with each :class:`AssignmentChange`.
    """

    def __init__(
        self,
        client: KazooClient,
        layout: GroupLayout,
        member_id: str,
        on_change: Callable[[AssignmentChange], None],
    ) -> None:
        self._client = client
        self._layout = layout
        self._member_id = member_id
        self._on_change = on_change
        self._seen = AssignmentSnapshot(0, SlotMap(), None, -1)
        self._first = True
        self._refresher = Refresher(f"keyshared-assignment-{member_id}", self._refresh, client)
        client.DataWatch(layout.assignment, self._on_data)

    @property
    def current(self) -> AssignmentSnapshot:
        """The last generation reported."""
        return self._seen

    def _on_data(self, _data: bytes | None, _stat: ZnodeStat | None) -> bool | None:
        if self._refresher.stopped:
            return False
        self._refresher.poke()
        return None

    def _refresh(self) -> None:
        snapshot = read_assignment(self._client, self._layout)
        if not self._first and snapshot.generation <= self._seen.generation:
            return
        self._first = False
        change = AssignmentChange.between(
            self._member_id, self._seen.assignment, snapshot.assignment, snapshot.generation
        )
        self._seen = snapshot
        log.info(
            "member %s: generation %d, gained %s, lost %s",
            self._member_id,
            change.generation,
            [str(r) for r in change.gained],
            [str(r) for r in change.lost],
        )
        self._on_change(change)

    def stop(self) -> None:
        """Stop reporting."""
        self._refresher.stop()
