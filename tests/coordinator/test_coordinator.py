"""The façade end to end, the way the consumer will drive it: two members, a hand-over with its
drain, cursors carried across, and the status read model along the way."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest

from coordinator import (
    AssignmentChange,
    Lease,
    MemberInfo,
    SessionEvent,
    SessionState,
    ZooKeeperCoordinator,
)
from coordinator.errors import CoordinatorUnreachable
from keyshared.core.slots import SlotRange
from keyshared.dev.topics import unique_name
from keyshared.errors import ConfigurationError
from tests.coordinator.conftest import (
    NAMESPACE,
    WAIT_S,
    closed_port,
    expire_session,
    take,
    take_until,
)

FIRST, SECOND = SlotRange(0, 32767), SlotRange(32768, 65535)
EVERYTHING = SlotRange(0, 65535)


@pytest.fixture
def coordinators(zookeeper_hosts: str) -> Iterator[list[ZooKeeperCoordinator]]:
    made: list[ZooKeeperCoordinator] = []
    yield made
    for coordinator in made:
        coordinator.close()


def test_hand_over_drains_and_carries_cursors(
    zookeeper_hosts: str, coordinators: list[ZooKeeperCoordinator]
) -> None:
    group = unique_name("group")

    def member(member_id: str) -> tuple[ZooKeeperCoordinator, queue.Queue[AssignmentChange]]:
        zk = ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE, session_timeout=5)
        coordinators.append(zk.start())
        changes: queue.Queue[AssignmentChange] = queue.Queue()
        zk.watch_assignment(group, member_id, changes.put)
        zk.join(group, MemberInfo(member_id, topics=("payments",)))
        zk.leader(group, member_id).start()
        return zk, changes

    a, a_changes = member("A")
    first = take_until(a_changes, lambda c: c.owned == (EVERYTHING,), "A owning everything")
    a_leases = a.range_leases(group, "A")
    a_lease = a_leases.acquire(EVERYTHING, generation=first.generation, timeout=WAIT_S)
    a_writer = a.cursor_writer(group, a_lease)
    a_writer.stage("payments", 0, 70)
    a_writer.flush()

    b, b_changes = member("B")
    b_gain = take_until(b_changes, lambda c: bool(c.gained), "B's gain")
    a_loss = take_until(a_changes, lambda c: bool(c.lost), "A's loss")
    assert b_gain.gained == a_loss.lost == (SECOND,)
    assert b_gain.generation == a_loss.generation

    # B queues for what it gained; A takes its smaller range at once
    b_pending = b.range_leases(group, "B").begin(SECOND, generation=b_gain.generation)
    granted: queue.Queue[Lease] = queue.Queue()
    threading.Thread(target=lambda: granted.put(b_pending.wait(WAIT_S)), daemon=True).start()
    a_small = a_leases.acquire(a_loss.owned[0], generation=a_loss.generation, timeout=WAIT_S)
    status = a.status(group)
    assert status.generation == a_loss.generation and set(status.members) == {"A", "B"}
    assert status.leader == "A"
    second = next(r for r in status.ranges if r.slots == SECOND)
    assert second.owner == "B" and second.lease_holders == ("A",) and second.draining
    assert granted.empty()

    # A drains SECOND, writes its last cursor through the old lease, and releases it
    a_writer.stage("payments", 0, 90)
    a_writer.flush()
    a_leases.release(a_lease)
    b_lease = take(granted, "B's lease after A's drain")
    assert b_lease.token > a_lease.token >= 0
    assert b.start_positions(group, SECOND)[("payments", 0)].offset == 90
    after = b.status(group)
    assert {r.slots: r.lease_holders for r in after.ranges} == {FIRST: ("A",), SECOND: ("B",)}
    assert a_leases.is_held(a_small)


def test_session_events_and_rejoin_after_expiry(
    zookeeper_hosts: str, coordinators: list[ZooKeeperCoordinator]
) -> None:
    group = unique_name("group")
    zk = ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE).start()
    coordinators.append(zk)
    events: queue.Queue[SessionEvent] = queue.Queue()
    zk.watch_session(events.put)
    membership = zk.join(group, MemberInfo("A"))
    expire_session(zk.client, zookeeper_hosts)
    take_until(events, lambda e: e.state == SessionState.LOST, "LOST")
    take_until(events, lambda e: e.state == SessionState.RENEWED, "RENEWED")
    assert "A" not in zk.status(group).members  # the ephemeral went with the old session
    membership.join()  # what the consumer does on RENEWED
    assert "A" in zk.status(group).members


def test_unreachable_and_bad_options() -> None:
    hosts = f"127.0.0.1:{closed_port()}"
    with pytest.raises(CoordinatorUnreachable, match=hosts):
        ZooKeeperCoordinator(hosts, connect_timeout=0.5).start()
    with pytest.raises(ConfigurationError, match="hosts"):
        ZooKeeperCoordinator(" ")
    with pytest.raises(ConfigurationError, match="auth"):
        ZooKeeperCoordinator("h:1", auth=("user", ""))


def test_status_of_an_unknown_group(
    zookeeper_hosts: str, coordinators: list[ZooKeeperCoordinator]
) -> None:
    zk = ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE).start()
    coordinators.append(zk)
    status = zk.status(unique_name("nobody"))
    assert not status.exists and status.generation == 0 and status.members == {}
