"""Membership: ephemeral member znodes, and a watch that reports the live set."""

from __future__ import annotations

import queue

import pytest

from coordinator.errors import MemberIdInUse
from coordinator.layout import GroupLayout
from coordinator.members import MemberInfo, Membership, MembersWatch, read_members
from tests.coordinator.conftest import ClientFactory, expire_session, take_until
from tests.coordinator.test_lease_ownership import LostReply


def test_members_appear_and_disappear_with_their_sessions(
    zk_client: ClientFactory, layout: GroupLayout, zookeeper_hosts: str
) -> None:
    watcher = zk_client()
    live: queue.Queue[set[str]] = queue.Queue()
    watch = MembersWatch(watcher, layout, lambda members: live.put(set(members)))
    take_until(live, lambda ids: ids == set(), "the empty group")

    a, b = zk_client(), zk_client()
    info_a = MemberInfo("a", key_filters=("pay*",), topics=("payments",), weight=2)
    Membership(a, layout, info_a).join()
    Membership(b, layout, MemberInfo("b")).join()
    take_until(live, lambda ids: ids == {"a", "b"}, "a and b")
    assert read_members(watcher, layout)["a"] == info_a

    a.stop()  # a clean close ends the session: the ephemeral goes at once
    take_until(live, lambda ids: ids == {"b"}, "a gone after its session closed")
    expire_session(b, zookeeper_hosts)
    take_until(live, lambda ids: ids == set(), "b gone after its session expired")
    watch.stop()


def test_leave_and_rejoin(zk_client: ClientFactory, layout: GroupLayout) -> None:
    client = zk_client()
    membership = Membership(client, layout, MemberInfo("m"))
    membership.join()
    membership.join()  # idempotent within the session
    membership.leave()
    assert read_members(client, layout) == {}
    membership.join()
    assert set(read_members(client, layout)) == {"m"}


def test_a_member_id_in_use_by_another_session_is_refused(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    Membership(zk_client(), layout, MemberInfo("same")).join()
    with pytest.raises(MemberIdInUse, match="'same'"):
        Membership(zk_client(), layout, MemberInfo("same")).join()


def test_a_join_whose_reply_was_lost_joins_in_the_same_session(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    """ZooKeeper created the member znode but its reply was lost with the connection (a
    chaos run's lost reply, on a replacement member's first write): the join goes on and
    finds the znode its own session's, instead of failing the member's start with
    ConnectionLoss."""
    lossy = LostReply(zk_client())
    lossy.lose_next.set()
    Membership(lossy, layout, MemberInfo("m")).join()  # type: ignore[arg-type]
    assert lossy.lost, "the create's reply was not lost"
    assert set(read_members(lossy, layout)) == {"m"}  # type: ignore[arg-type]
