"""A lease is its holder's by its ZooKeeper session, never by a name two sessions could share.

Two ways a name was trusted where only the session can tell:

- a lease ``create`` that ZooKeeper applied but whose answer was lost (ConnectionLoss): the
  caller queues again, and the first znode, unknown to it, stayed for the session's life. Its
  own member never waited on it, so nobody noticed until the range (or partition) moved: the
  next owner queued behind it for good;
- two sessions with one member id (two processes started with one ``client.id``): the second
  took the first one's lease for its own and was granted beside it.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from coordinator.errors import LeaseTimeout
from coordinator.layout import GroupLayout
from coordinator.leases import Lease, PartitionLeases, PendingLease, RangeLeases
from keyshared.core.slots import SlotRange
from tests.coordinator.conftest import WAIT_S, ClientFactory

HALF = SlotRange(0, 32767)


class LostReply:
    """A kazoo client whose next ``create`` reaches ZooKeeper and is applied, but whose answer
    is lost: the caller gets ConnectionLoss, as when the link drops after the server applied
    the request (kazoo fails every request in flight that way)."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self.lose_next = threading.Event()
        self.lost: list[str] = []

    def create(self, path: str, *args: Any, **kwargs: Any) -> str:
        created: str = self._client.create(path, *args, **kwargs)
        if self.lose_next.is_set():
            self.lose_next.clear()
            self.lost.append(created)
            raise ConnectionLoss()
        return created

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def _range(leases: RangeLeases | PartitionLeases, generation: int) -> PendingLease:
    if isinstance(leases, RangeLeases):
        return leases.begin(HALF, generation=generation)
    return leases.begin("pay.ments", 0, generation=generation)


@pytest.mark.parametrize("kind", [RangeLeases, PartitionLeases])
def test_a_create_whose_answer_was_lost_leaves_no_znode_behind(
    zk_client: ClientFactory, layout: GroupLayout, kind: type[RangeLeases | PartitionLeases]
) -> None:
    lossy = LostReply(zk_client())
    a = kind(lossy, layout, "A")
    lossy.lose_next.set()
    with pytest.raises(ConnectionLoss):
        _range(a, 1)  # applied by ZooKeeper; A does not know its znode
    assert lossy.lost, "the create reached ZooKeeper"
    a_lease = _range(a, 1).wait(WAIT_S)  # the caller queues again, as the members do
    a.release(a_lease)  # the range (or partition) moves on: A drained and let go

    b = kind(zk_client(), layout, "B")
    b_lease = _range(b, 2).wait(WAIT_S)  # blocked for good by the lost znode before the fix
    assert isinstance(b_lease, Lease) and b_lease.member_id == "B"
    assert [(info.member_id, info.held) for info in b.read()] == [("B", True)]


def test_two_sessions_with_one_member_id_queue_like_two_members(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    first = RangeLeases(zk_client(), layout, "A")
    second = RangeLeases(zk_client(), layout, "A")  # a second process with the same client.id
    first_lease = first.acquire(HALF, generation=1, timeout=WAIT_S)
    with pytest.raises(LeaseTimeout) as caught:
        second.acquire(HALF, generation=2, timeout=1.0)
    assert caught.value.blockers == [first_lease.path]
    # status counts one holder: the second session's queued znode is not granted beside it
    pending = second.begin(HALF, generation=2)
    assert [info.held for info in first.read()] == [True, False]
    first.release(first_lease)
    assert pending.wait(WAIT_S).token > first_lease.token


def test_a_member_s_own_older_lease_still_never_blocks_it(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    a = RangeLeases(zk_client(), layout, "A")
    wide = a.acquire(SlotRange(0, 65535), generation=1, timeout=WAIT_S)
    narrow = a.acquire(HALF, generation=2, timeout=1.0)  # one session: granted at once
    assert [info.held for info in a.read()] == [True, True]
    assert narrow.token > wide.token
