"""Operator pins: set, replace, release, refuse overlaps, and the leader applies them."""

from __future__ import annotations

import queue

import pytest

from coordinator.assignment import AssignmentSnapshot
from coordinator.errors import PinConflict
from coordinator.layout import GroupLayout
from coordinator.leader import AssignmentLeader
from coordinator.members import MemberInfo, Membership
from coordinator.pins import Pins
from keyshared.core.slots import SlotRange
from tests.coordinator.conftest import ClientFactory, take_until


def test_set_replace_release(zk_client: ClientFactory, layout: GroupLayout) -> None:
    pins = Pins(zk_client(), layout)
    pins.set(SlotRange(0, 999), "a")
    pins.set(SlotRange(0, 999), "b")  # same range: replaced
    pins.set(SlotRange(5000, 5999), "a")
    assert pins.list() == {SlotRange(0, 999): "b", SlotRange(5000, 5999): "a"}
    with pytest.raises(PinConflict, match="overlaps the pin of 0-999 to 'b'"):
        pins.set(SlotRange(500, 1500), "c")
    assert pins.release(SlotRange(0, 999)) is True
    assert pins.release(SlotRange(0, 999)) is False
    assert pins.list() == {SlotRange(5000, 5999): "a"}


def test_the_leader_applies_pins_of_live_members(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    written: queue.Queue[AssignmentSnapshot] = queue.Queue()
    client = zk_client()
    for member in ("a", "b"):
        Membership(zk_client(), layout, MemberInfo(member)).join()
    leader = AssignmentLeader(client, layout, "planner", on_written=written.put)
    leader.start()
    try:
        take_until(written, lambda s: s.assignment.members == {"a", "b"}, "a and b")
        pins = Pins(client, layout)
        pins.set(SlotRange(0, 999), "b")  # a owned 0-32767: the operator moves 0-999 to b
        pinned = take_until(written, lambda s: s.assignment.owner_of(0) == "b", "the pin")
        assert pinned.assignment.owner_of(999) == "b"
        loads = [sum(r.size for r in pinned.assignment.ranges_of(m)) for m in ("a", "b")]
        fair = 65536 / 2  # balanced around the pin, within the planner's tolerance
        assert all(0.75 * fair <= load <= 1.25 * fair for load in loads), loads
        pins.set(SlotRange(0, 999), "late")  # "late" is not live: the pin waits for it
        Membership(zk_client(), layout, MemberInfo("late")).join()
        joined = take_until(written, lambda s: "late" in s.assignment.members, "late's join")
        assert joined.assignment.ranges_of("late")[0] == SlotRange(0, 999)
    finally:
        leader.stop()
