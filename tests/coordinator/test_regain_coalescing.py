"""A member reads its cursors once for the ranges a plan gives it together, not once per lease
(no server: the member's collaborators are stand-ins; what is checked is when it rebuilds).

Found by the 30-minute chaos run: every grant drained the member and re-read every partition
(about 3 s each on a loaded machine), and with the plan changing every few seconds the members
spent the run rebuilding."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from keyshared.core.slots import SlotRange
from keyshared.modes import key_shared
from keyshared.modes.handback import HandBack
from keyshared.modes.held_ranges import HeldRanges
from keyshared.modes.key_shared import KeySharedMember

RANGES = [SlotRange(0, 99), SlotRange(100, 199), SlotRange(200, 299)]


class Queue:
    """The lease queue: ``waiting`` acquisitions still under way."""

    def __init__(self, waiting: int) -> None:
        self.waiting = waiting
        self.unqueued = False  # no queueing again failed

    def __len__(self) -> int:
        return self.waiting


def member(waiting: int) -> tuple[KeySharedMember, list[int]]:
    """A member whose plan wants RANGES, ``waiting`` of them not granted yet."""
    m = KeySharedMember.__new__(KeySharedMember)
    rebuilds: list[int] = []
    hand_back = HandBack(SimpleNamespace(running=lambda _states: 0), lambda: True)  # type: ignore[arg-type]
    fields: dict[str, Any] = {
        "_closing": False,
        "_gate": SimpleNamespace(
            lost=False, suspended=False, metrics=SimpleNamespace(holdings=lambda *_: None)
        ),
        "_desired": tuple(RANGES),
        "_held": HeldRanges(SimpleNamespace(), lambda lease: object(), lambda: None, hand_back),  # type: ignore[arg-type, return-value]
        "_assign_retry_at": None,
        "_regain_at": None,
        "_queue": Queue(waiting),
        "_group": "g",
        "_dispatcher": SimpleNamespace(running=lambda _states: 0),  # nothing given up: never taken
        "_deferred": SimpleNamespace(ready=lambda: False),  # no re-read waiting for records
        "_topics": SimpleNamespace(changed=lambda: False),  # no partition added meanwhile
        "_membership": None,  # not joined: the Kafka probe's check has nothing to leave
        "_missing": False,  # every wanted range queued or held
    }
    for name, value in fields.items():
        setattr(m, name, value)
    m.holdings, m._hand_back = m._held.holdings, hand_back  # as the member hands them over
    for slots in RANGES:  # queued for: the queue wanted each range
        m.holdings.want(str(slots))

    def rebuild(drop: list[SlotRange]) -> None:
        rebuilds.append(len(m._held))
        m._regain_at = None  # as _assign_now does

    m._rebuild = rebuild  # type: ignore[method-assign]
    return m, rebuilds


def test_grants_of_one_plan_are_read_together_when_the_last_arrives() -> None:
    m, rebuilds = member(waiting=3)
    for slots in RANGES:
        m._queue.waiting -= 1  # the queue forgets a range before handing its lease over
        m._granted(slots, SimpleNamespace())  # type: ignore[arg-type]
    assert rebuilds == [3], f"one read with all three ranges, got reads holding {rebuilds}"


def test_a_late_grant_does_not_hold_the_others_back_for_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(key_shared, "_REGAIN_COALESCE_S", 0.05)
    m, rebuilds = member(waiting=3)
    m._queue.waiting -= 1
    m._granted(RANGES[0], SimpleNamespace())  # type: ignore[arg-type]
    m.tick()
    assert rebuilds == [], "read before the others had a chance to arrive"
    deadline = time.monotonic() + 5
    while not rebuilds and time.monotonic() < deadline:
        m.tick()
        time.sleep(0.01)
    assert rebuilds == [1], "the range granted first must not wait for a slow one for good"
