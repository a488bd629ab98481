"""The liveness and readiness decisions, case by case (no broker, no clock)."""

from __future__ import annotations

import pytest

from keyshared.core.health import Role, StuckPartition, liveness, readiness
from keyshared.core.holding import HoldingView, Phase


def _ready(**overrides: object) -> tuple[bool, tuple[str, ...], dict[str, object]]:
    args: dict[str, object] = {
        "now": 1000.0,
        "last_iteration": 999.95,
        "wedged_after": 90.0,
        "role": Role.MEMBER,
        "partitions": 3,
        "stuck": [],
        "stuck_after": 60.0,
    }
    args.update(overrides)
    verdict = readiness(**args)  # type: ignore[arg-type]
    return verdict.ok, verdict.reasons, verdict.body()


def test_live_while_the_loop_iterates_within_the_bound() -> None:
    assert liveness(now=100.0, last_iteration=10.0, wedged_after=90.0).ok
    assert liveness(now=100.0, last_iteration=100.5, wedged_after=90.0).ok  # clock order noise


def test_a_loop_idle_past_the_bound_is_wedged_and_says_so() -> None:
    verdict = liveness(now=100.0, last_iteration=5.0, wedged_after=90.0)
    assert not verdict.ok
    assert "has not iterated for 95s" in verdict.reasons[0]
    body = verdict.body()
    assert body["status"] == "fail" and body["poll_loop_idle_seconds"] == 95.0


def test_member_with_partitions_and_nothing_stuck_is_ready() -> None:
    ok, reasons, body = _ready()
    assert ok and reasons == ()
    assert body == {
        "status": "ok",
        "reasons": [],
        "role": "member",
        "partitions": 3,
        "stuck": [],
        "holds": {},
        "holdings": [],
    }


def test_idle_member_and_standby_are_ready() -> None:
    assert _ready(partitions=0)[0]  # the group gave it nothing: joined, just idle
    ok, _, body = _ready(role=Role.STANDBY, partitions=0)
    assert ok and body["role"] == "standby"
    assert _ready(role=Role.ACTIVE)[0]


@pytest.mark.parametrize(
    ("role", "words"),
    [
        (Role.JOINING, "not joined yet"),
        (Role.SUSPENDED, "ZooKeeper connection lost"),
        (Role.FENCED, "ZooKeeper session lost"),
        (Role.STOPPING, "stopping"),
    ],
)
def test_roles_that_are_not_ready_say_why(role: Role, words: str) -> None:
    ok, reasons, body = _ready(role=role)
    assert not ok and words in reasons[0]
    assert body["role"] == role.value


def test_a_record_older_than_stuck_after_makes_the_member_not_ready() -> None:
    young = StuckPartition("orders", 0, offset=7, age=59.0)
    old = StuckPartition("orders", 2, offset=41, age=61.2)
    ok, reasons, body = _ready(stuck=[young, old])
    assert not ok
    assert reasons == ("orders[2]@41 has held the committed offset back for 61s (stuck_after=60s)",)
    assert body["stuck"] == [{"topic": "orders", "partition": 2, "offset": 41, "age": 61}]


def test_a_wedged_loop_is_not_ready_either() -> None:
    ok, reasons, _ = _ready(last_iteration=800.0)
    assert not ok and "wedged" in reasons[0]


def test_every_reason_is_listed() -> None:
    ok, reasons, _ = _ready(
        role=Role.JOINING,
        last_iteration=0.0,
        stuck=[StuckPartition("t", 1, offset=0, age=100.0)],
    )
    assert not ok and len(reasons) == 3


def test_a_hold_on_dispatch_is_named_and_a_long_one_makes_the_member_not_ready() -> None:
    ok, reasons, body = _ready(holds={"zookeeper-liveness": 2.0})
    assert ok and body["holds"] == {"zookeeper-liveness": 2.0}
    ok, reasons, body = _ready(holds={"zookeeper-liveness": 75.0, "zookeeper-connection": 1.0})
    assert not ok
    assert reasons == (
        "dispatch held by 'zookeeper-liveness' for 75s (stuck_after=60s): no handler starts "
        "until its owner lifts it",
    )


def test_holdings_are_shown_with_phase_and_age_and_never_fail_readiness_by_themselves() -> None:
    holdings = [
        HoldingView("0-32767", Phase.ACTIVE, since=400.0),
        HoldingView("32768-65535", Phase.HANDING_BACK, since=990.0, alive=False),
        HoldingView("orders@3", Phase.WAITING, since=0.0),  # a long wait: another's drain
    ]
    ok, reasons, body = _ready(holdings=holdings)
    assert ok and reasons == ()
    assert body["holdings"] == [
        {"name": "0-32767", "phase": "active", "age": 600.0, "alive": True},
        {"name": "32768-65535", "phase": "handing_back", "age": 10.0, "alive": False},
        {"name": "orders@3", "phase": "waiting", "age": 1000.0, "alive": True},
    ]
    assert _ready()[2]["holdings"] == []
