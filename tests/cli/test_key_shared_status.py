"""``keyshared status`` for key_shared groups: the view built from the coordinator's read model."""

from __future__ import annotations

from coordinator.cursors import Cursor
from coordinator.leases import LeaseInfo
from coordinator.members import MemberInfo
from coordinator.status import GroupStatus, RangeStatus
from keyshared.core.slots import SlotRange
from keyshared.ops.key_shared_view import key_shared_view

LOW, HIGH = SlotRange(0, 32767), SlotRange(32768, 65535)


def status(**changes: object) -> GroupStatus:
    base = {
        "group": "g",
        "exists": True,
        "members": {"A": MemberInfo("A", host="h", pid=1), "B": MemberInfo("B", host="h", pid=2)},
        "leader": "A",
        "generation": 4,
        "ranges": (RangeStatus(LOW, "A", ("A",)), RangeStatus(HIGH, "B", ("A",))),
        "leases": (
            LeaseInfo("00000-65535", "/l/00000-65535-1", "A", 3, 1, True),
            LeaseInfo("00000-32767", "/l/00000-32767-2", "A", 4, 2, True),
            LeaseInfo("32768-65535", "/l/32768-65535-3", "B", 4, 3, False),
        ),
        "partition_leases": (),
        "pins": {HIGH: "B"},
        "cursors": (
            Cursor(SlotRange(0, 65535), "t", 0, 100, "", "A", 1),
            Cursor(LOW, "t", 0, 180, "", "A", 2),
        ),
        "active": None,
    }
    base.update(changes)
    return GroupStatus(**base)  # type: ignore[arg-type]


def test_a_range_still_draining_names_whom_it_waits_for_and_where_each_range_stands() -> None:
    view = key_shared_view(status(), {("t", 0): 250})
    low, high = view.ranges
    assert not low.draining and low.positions[0].resume_at == 180 and low.positions[0].lag == 70
    assert high.draining and high.waits_for == ("A",)
    assert high.positions[0].resume_at == 100  # the wide cursor still covers the upper half
    assert view.pins == {"32768-65535": "B"}
    assert sorted(view.members) == ["A", "B"] and view.generation == 4


def test_a_partition_without_cursors_starts_from_the_group_offset() -> None:
    view = key_shared_view(status(cursors=()), {("t", 0): 10})
    assert all(p.resume_at is None and p.lag is None for r in view.ranges for p in r.positions)
    assert view.to_json()["ranges"][0]["owner"] == "A"
