"""The Kafka probe of a coordinated member (:mod:`keyshared.modes.kafka_liveness`), without
servers: silence counts only from probes that were sent and went unanswered."""

from __future__ import annotations

import time

import pytest

from keyshared.modes import kafka_liveness
from keyshared.modes.kafka_liveness import KafkaLiveness, RoleWithdrawal
from tests.coordinator.conftest import closed_port
from tests.helpers import wait_until


def test_the_bound_is_the_consumers_session_timeout() -> None:
    assert KafkaLiveness({"bootstrap.servers": "x:1"}, ["t"]).bound == 45.0  # librdkafka's
    config = {"bootstrap.servers": "x:1", "session.timeout.ms": "6000"}
    assert KafkaLiveness(config, ["t"]).bound == 6.0


def test_a_member_frozen_with_its_probe_is_not_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    # A SIGSTOP or a GC pause freezes the probe as well: after it, no probe went unanswered,
    # so nothing is known against Kafka. Counted from the last answer instead, a member
    # resumed after a 7 s stall left the plan at once (found by the chaos run, issue 27).
    liveness = KafkaLiveness({"bootstrap.servers": f"127.0.0.1:{closed_port()}"}, ["t"])
    liveness.start()
    liveness.stop()  # frozen: no probe runs any more
    later = time.monotonic() + 60
    monkeypatch.setattr(kafka_liveness.time, "monotonic", lambda: later)
    assert liveness.silent_for() == 0.0 and liveness.answering()


def test_unanswered_probes_make_silence_from_the_first_of_them() -> None:
    liveness = KafkaLiveness(
        {"bootstrap.servers": f"127.0.0.1:{closed_port()}"}, ["t"], probe_every=0.05
    )
    liveness.start()
    try:
        wait_until(lambda: liveness.silent_for() > 0.5, "silence to grow", timeout=15)
        assert not liveness.answering()
    finally:
        liveness.stop()


class _Silence:
    """A liveness whose silence the test sets (``bound`` 6 s)."""

    bound = 6.0

    def __init__(self) -> None:
        self.silent = 0.0

    def silent_for(self) -> float:
        return self.silent

    def answering(self) -> bool:
        return self.silent == 0.0


def _withdrawal(queued: list[bool]) -> tuple[_Silence, RoleWithdrawal, list[str]]:
    silence, calls = _Silence(), []
    withdrawal = RoleWithdrawal(silence, "m", "g", lambda: queued[0])  # type: ignore[arg-type]
    return silence, withdrawal, calls


def _check(withdrawal: RoleWithdrawal, calls: list[str], active: bool) -> None:
    withdrawal.check(active, lambda: calls.append("leave"), lambda: calls.append("rejoin"))


def test_a_standby_leaves_the_queue_past_the_bound_and_queues_again_once_kafka_answers() -> None:
    silence, withdrawal, calls = _withdrawal([True])
    silence.silent = 5.9
    _check(withdrawal, calls, active=False)
    assert calls == []
    silence.silent = 6.1
    _check(withdrawal, calls, active=False)
    _check(withdrawal, calls, active=False)
    assert calls == ["leave"] and withdrawal.withdrawn
    silence.silent = 0.0
    _check(withdrawal, calls, active=False)
    assert calls == ["leave", "rejoin"] and not withdrawal.withdrawn


def test_the_active_member_keeps_the_role_while_no_standby_reaches_kafka() -> None:
    # Kafka away for everyone (a one-broker cluster restarting): the standbys left the queue
    # at the bound; a failover would only redo what the active member finished uncommitted.
    # Without this rule the short exclusive chaos run redid 6,067 records after a 15 s broker
    # restart instead of 470.
    queued = [False]
    silence, withdrawal, calls = _withdrawal(queued)
    silence.silent = 30.0
    _check(withdrawal, calls, active=True)
    assert calls == [] and not withdrawal.withdrawn
    queued[0] = True  # a standby reaches Kafka: only this member is cut off
    withdrawal._next_look = 0.0  # the once-a-second look is due
    _check(withdrawal, calls, active=True)
    assert calls == ["leave"] and withdrawal.withdrawn


def test_the_active_member_waits_a_grace_period_for_the_standbys_to_leave_first() -> None:
    silence, withdrawal, calls = _withdrawal([True])
    silence.silent = 6.0 + 4.9
    _check(withdrawal, calls, active=True)
    assert calls == []
    silence.silent = 6.0 + 5.1
    _check(withdrawal, calls, active=True)
    assert calls == ["leave"]
