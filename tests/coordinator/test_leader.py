"""Leader election and the compare-and-set assignment write: one leader, takeover with a higher
generation, and no write from a stale leader."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import pytest

from coordinator.assignment import AssignmentSnapshot, read_assignment, write_assignment
from coordinator.errors import NotLeader
from coordinator.layout import GroupLayout
from coordinator.leader import AssignmentLeader
from coordinator.members import MemberInfo, Membership
from coordinator.pins import Pins
from keyshared.core.slots import SlotMap, SlotRange
from tests.coordinator.conftest import ClientFactory, expire_session, take_until


@pytest.fixture
def leaders() -> Iterator[list[AssignmentLeader]]:
    started: list[AssignmentLeader] = []
    yield started
    for leader in started:
        leader.stop()


def _member(
    zk_client: ClientFactory,
    layout: GroupLayout,
    member_id: str,
    written: queue.Queue[AssignmentSnapshot],
    leaders: list[AssignmentLeader],
) -> AssignmentLeader:
    client = zk_client()
    Membership(client, layout, MemberInfo(member_id)).join()
    leader = AssignmentLeader(client, layout, member_id, on_written=written.put)
    leader.start()
    leaders.append(leader)
    return leader


def test_one_leader_and_a_takeover_writes_a_higher_generation(
    zk_client: ClientFactory,
    layout: GroupLayout,
    zookeeper_hosts: str,
    leaders: list[AssignmentLeader],
) -> None:
    written: queue.Queue[AssignmentSnapshot] = queue.Queue()
    candidates = [_member(zk_client, layout, m, written, leaders) for m in ("a", "b", "c")]
    first = take_until(
        written, lambda s: s.assignment.members == {"a", "b", "c"}, "a plan for a, b and c"
    )
    assert [c.is_leader for c in candidates].count(True) == 1
    leader = next(c for c in candidates if c.is_leader)
    assert first.leader == leader.contenders()[0]

    dead = leader._client  # the leader's session ends, as on a crash
    expire_session(dead, zookeeper_hosts)
    leader.stop()  # the crashed process would not contend again
    survivors = {"a", "b", "c"} - {first.leader}
    second = take_until(
        written, lambda s: s.assignment.members == survivors, "a plan without the old leader"
    )
    assert second.leader in survivors
    assert second.generation > first.generation
    assert read_assignment(dead, layout).generation == second.generation


def test_a_stale_leader_cannot_overwrite_the_assignment(
    zk_client: ClientFactory, layout: GroupLayout, leaders: list[AssignmentLeader]
) -> None:
    written: queue.Queue[AssignmentSnapshot] = queue.Queue()
    leader = _member(zk_client, layout, "a", written, leaders)
    seen = take_until(written, lambda s: s.assignment.members == {"a"}, "the first plan")
    node = f"{leader._election.lock.path}/{leader._election.lock.node}"
    _member(zk_client, layout, "b", written, leaders)
    take_until(written, lambda s: s.generation > seen.generation, "the plan with b")

    stale_plan = SlotMap({SlotRange(0, 65535): "a"})
    with pytest.raises(NotLeader, match="changed since generation"):
        write_assignment(
            leader._client, layout, stale_plan, based_on=seen, leader_id="a", leader_node=node
        )
    with pytest.raises(NotLeader, match="election znode is gone"):
        write_assignment(
            leader._client,
            layout,
            stale_plan,
            based_on=read_assignment(leader._client, layout),
            leader_id="a",
            leader_node=f"{layout.leader}/not-a-contender",
        )
    assert read_assignment(leader._client, layout).assignment.members == {"a", "b"}


def test_planning_again_with_the_same_members_writes_nothing(
    zk_client: ClientFactory, layout: GroupLayout, leaders: list[AssignmentLeader]
) -> None:
    written: queue.Queue[AssignmentSnapshot] = queue.Queue()
    leader = _member(zk_client, layout, "a", written, leaders)
    take_until(written, lambda s: s.assignment.members == {"a"}, "the first plan")
    pins = Pins(leader._client, layout)
    pins.set(SlotRange(0, 99), "a")  # wakes the planner; a owns 0-99 already: nothing moves
    pins.release(SlotRange(0, 99))
    client = zk_client()
    Membership(client, layout, MemberInfo("b")).join()
    latest = take_until(written, lambda s: s.assignment.members == {"a", "b"}, "the plan with b")
    assert latest.generation == 2  # nothing was written for the no-op wake-ups
