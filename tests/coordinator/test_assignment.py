"""The written plan as members join (1 -> 2 -> 4): it covers every slot once, balanced and
sticky, and each member's watch reports what it gained and lost."""

from __future__ import annotations

import itertools
import queue
from collections.abc import Iterator

import pytest

from coordinator.assignment import (
    AssignmentChange,
    AssignmentSnapshot,
    AssignmentWatch,
    subtract_ranges,
)
from coordinator.layout import GroupLayout
from coordinator.leader import AssignmentLeader
from coordinator.members import MemberInfo, Membership
from keyshared.core.slots import MAX_SLOT, SlotMap, SlotRange
from tests.coordinator.conftest import ClientFactory, take_until


def _check_covers_everything_once(assignment: SlotMap) -> None:
    items = assignment.items()
    assert items[0][0].lo == 0 and items[-1][0].hi == MAX_SLOT
    for (left, _), (right, _) in itertools.pairwise(items):
        assert left.hi + 1 == right.lo, f"gap or overlap between {left} and {right}"
    loads = {m: sum(r.size for r in assignment.ranges_of(m)) for m in assignment.members}
    assert max(loads.values()) - min(loads.values()) <= 1, loads


def _owner_by_slot(assignment: SlotMap) -> list[str | None]:
    owners: list[str | None] = [None] * (MAX_SLOT + 1)
    for slots, owner in assignment.items():
        owners[slots.lo : slots.hi + 1] = [owner] * slots.size
    return owners


@pytest.fixture
def leader_of(
    layout: GroupLayout, zk_client: ClientFactory
) -> Iterator[queue.Queue[AssignmentSnapshot]]:
    written: queue.Queue[AssignmentSnapshot] = queue.Queue()
    leader = AssignmentLeader(zk_client(), layout, "planner", on_written=written.put)
    leader.start()  # a contender that is not a member: it plans but owns nothing
    yield written
    leader.stop()


def test_one_two_four_members_cover_the_space_without_overlap_and_stick(
    zk_client: ClientFactory, layout: GroupLayout, leader_of: queue.Queue[AssignmentSnapshot]
) -> None:
    previous: SlotMap | None = None
    joined: list[str] = []
    for count in (1, 2, 4):
        while len(joined) < count:
            member = f"m{len(joined)}"
            Membership(zk_client(), layout, MemberInfo(member)).join()
            joined.append(member)
        snapshot = take_until(
            leader_of, lambda s, n=set(joined): s.assignment.members == n, f"{count} members"
        )
        _check_covers_everything_once(snapshot.assignment)
        if previous is not None:
            before, after = _owner_by_slot(previous), _owner_by_slot(snapshot.assignment)
            newcomers = set(snapshot.assignment.members) - set(previous.members)
            for slot in range(MAX_SLOT + 1):
                # sticky: a slot either stays with its owner or goes to a newcomer
                assert after[slot] == before[slot] or after[slot] in newcomers, slot
        previous = snapshot.assignment


def test_watch_reports_gains_and_losses_per_generation(
    zk_client: ClientFactory, layout: GroupLayout, leader_of: queue.Queue[AssignmentSnapshot]
) -> None:
    b_client = zk_client()
    changes: queue.Queue[AssignmentChange] = queue.Queue()
    watch = AssignmentWatch(b_client, layout, "b", changes.put)
    Membership(zk_client(), layout, MemberInfo("a")).join()
    Membership(b_client, layout, MemberInfo("b")).join()
    joined = take_until(changes, lambda c: bool(c.owned), "b's first ranges")
    assert joined.gained == joined.owned == joined.acquire and not joined.lost
    assert joined.owned == (SlotRange(32768, MAX_SLOT),)

    Membership(zk_client(), layout, MemberInfo("c")).join()
    shrunk = take_until(changes, lambda c: c.assignment.members == {"a", "b", "c"}, "c's join")
    assert shrunk.generation > joined.generation
    assert not shrunk.gained
    assert shrunk.lost == tuple(subtract_ranges(joined.owned, shrunk.owned))
    assert all(shrunk.assignment.owner_of(r.lo) == "c" for r in shrunk.lost)
    assert shrunk.release == joined.owned and shrunk.acquire == shrunk.owned
    assert watch.current.generation == shrunk.generation
    watch.stop()


def test_subtract_ranges() -> None:
    whole = [SlotRange(0, 99)]
    assert subtract_ranges(whole, [SlotRange(10, 19), SlotRange(50, 200)]) == [
        SlotRange(0, 9),
        SlotRange(20, 49),
    ]
    assert subtract_ranges(whole, []) == whole
    assert subtract_ranges(whole, whole) == []
