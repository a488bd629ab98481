"""Partition leases refuse a second live process with the same member id (issue 24).

A member's own leases never block it (a member whose range shrinks takes the smaller one at
once). Two live processes started with the same ``client.id`` therefore skipped each other's
partition leases: both ran a partition the group moved between them, and the drain was off.
The second one now fails at start with an error naming the member id, after waiting one session
timeout for a predecessor's session to expire (a process restarted at once keeps working).
"""

from __future__ import annotations

import pytest

import keyshared
from coordinator import MemberIdInUse, ZooKeeperCoordinator
from tests.coordinator.conftest import NAMESPACE, WAIT_S
from tests.coordinator.members import StartMember
from tests.kafka.support.inprocess import Recorder, run_on_thread

SESSION_TIMEOUT = 2.0


def test_a_second_live_process_with_the_same_member_id_is_refused_at_start(
    start: StartMember,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
    zookeeper_hosts: str,
) -> None:
    topic = new_topic(2)  # type: ignore[operator]
    group = new_group("same-member-id")  # type: ignore[operator]
    start(group, topic, Recorder(pid=1), member="same", mode="partition")

    config = {"bootstrap.servers": kafka_bootstrap, "group.id": group, "client.id": "same"}
    zk = ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE, session_timeout=SESSION_TIMEOUT)
    second = keyshared.KeySharedConsumer(
        config, [topic], Recorder(pid=2), coordinator=zk, mode="partition", drain_timeout=1.0
    )
    thread, errors = run_on_thread(second, name="second-process")
    thread.join(SESSION_TIMEOUT + WAIT_S)
    if thread.is_alive():
        second.stop()
        thread.join(WAIT_S)
        pytest.fail("a second process with member id 'same' started and ran beside the first")
    assert errors, "the second process ended without an error"
    assert isinstance(errors[0], MemberIdInUse), repr(errors[0])
    assert "'same'" in str(errors[0]) and group in str(errors[0])
