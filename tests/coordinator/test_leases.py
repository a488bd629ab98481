"""Leases and the mandatory drain: the new owner's acquire returns only once the previous
owner's lease is gone (released after its drain, or with its session)."""

from __future__ import annotations

import queue
import threading

import pytest

from coordinator.errors import AcquireCancelled, Fenced, LeaseTimeout
from coordinator.layout import GroupLayout
from coordinator.leases import Lease, PartitionLeases, RangeLeases
from keyshared.core.slots import SlotRange
from tests.coordinator.conftest import WAIT_S, ClientFactory, expire_session, take

HALF = SlotRange(0, 32767)


def _acquire_in_background(
    leases: RangeLeases, slots: SlotRange, generation: int
) -> queue.Queue[Lease | Exception]:
    result: queue.Queue[Lease | Exception] = queue.Queue()

    def run() -> None:
        try:
            result.put(leases.acquire(slots, generation=generation, timeout=WAIT_S))
        except Exception as error:
            result.put(error)

    threading.Thread(target=run, daemon=True).start()
    return result


def test_canonical_drain_new_owner_waits_for_release(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    a = RangeLeases(zk_client(), layout, "A")
    b = RangeLeases(zk_client(), layout, "B")
    a_lease = a.acquire(HALF, generation=1, timeout=WAIT_S)

    # the range moves to B (generation 2): B queues behind A's lease
    pending = b.begin(HALF, generation=2)
    waiting: queue.Queue[Lease | Exception] = queue.Queue()
    threading.Thread(target=lambda: waiting.put(pending.wait(WAIT_S)), daemon=True).start()
    assert [i.member_id for i in a.read() if i.held] == ["A"]
    assert [i.member_id for i in a.read() if not i.held] == ["B"]  # queued, visible
    assert waiting.empty()  # A still drains: B has nothing

    a.release(a_lease)  # A's in-flight records are done and its cursors written
    b_lease = take(waiting, "B's lease after A released")
    assert isinstance(b_lease, Lease)
    assert b_lease.member_id == "B" and b_lease.slots == HALF
    assert b_lease.token > a_lease.token  # later holder, larger fencing token
    assert [(i.member_id, i.held) for i in b.read()] == [("B", True)]


def test_session_expiry_of_the_old_owner_ends_the_drain(
    zk_client: ClientFactory, layout: GroupLayout, zookeeper_hosts: str
) -> None:
    a_client = zk_client()
    RangeLeases(a_client, layout, "A").acquire(HALF, generation=1)
    waiting = _acquire_in_background(RangeLeases(zk_client(), layout, "B"), HALF, 2)
    expire_session(a_client, zookeeper_hosts)  # A crashed: its lease goes with its session
    lease = take(waiting, "B's lease after A's session expired")
    assert isinstance(lease, Lease) and lease.member_id == "B"


def test_overlapping_ranges_queue_and_disjoint_ones_do_not(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    a = RangeLeases(zk_client(), layout, "A")
    b = RangeLeases(zk_client(), layout, "B")
    a_lease = a.acquire(SlotRange(0, 65535), generation=1)
    # A's range shrinks: its own lease never blocks it, so it takes the smaller range at once
    a_small = a.acquire(SlotRange(0, 21845), generation=2, timeout=WAIT_S)
    # B gained 21846-32767, which overlaps only A's old, wider lease
    waiting = _acquire_in_background(b, SlotRange(21846, 32767), 2)
    a.release(a_lease)  # A drained the part it lost
    lease = take(waiting, "B's partial range")
    assert isinstance(lease, Lease)
    # disjoint from A's remaining lease: no wait
    assert b.acquire(SlotRange(40000, 50000), generation=2, timeout=1.0).member_id == "B"
    assert a.is_held(a_small) and not a.is_held(a_lease)


def test_acquire_times_out_and_withdraws(zk_client: ClientFactory, layout: GroupLayout) -> None:
    a = RangeLeases(zk_client(), layout, "A")
    b = RangeLeases(zk_client(), layout, "B")
    a.acquire(HALF, generation=1)
    with pytest.raises(LeaseTimeout) as caught:
        b.acquire(HALF, generation=2, timeout=0.5)
    assert "00000-32767" in str(caught.value) and caught.value.blockers
    assert [i.member_id for i in a.read()] == ["A"]  # B's queued znode was withdrawn


def test_acquire_can_be_cancelled_from_another_thread(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    a = RangeLeases(zk_client(), layout, "A")
    b = RangeLeases(zk_client(), layout, "B")
    a.acquire(HALF, generation=1)
    pending = b.begin(HALF, generation=2)
    outcome: queue.Queue[BaseException | Lease] = queue.Queue()

    def run() -> None:
        try:
            outcome.put(pending.wait())
        except BaseException as error:
            outcome.put(error)

    threading.Thread(target=run, daemon=True).start()
    pending.cancel()
    assert isinstance(take(outcome, "cancellation"), AcquireCancelled)
    assert [i.member_id for i in a.read()] == ["A"]


def test_a_waiter_whose_session_expires_is_fenced(
    zk_client: ClientFactory, layout: GroupLayout, zookeeper_hosts: str
) -> None:
    RangeLeases(zk_client(), layout, "A").acquire(HALF, generation=1)
    b_client = zk_client()
    pending = RangeLeases(b_client, layout, "B").begin(HALF, generation=2)  # queued now
    waiting: queue.Queue[BaseException | Lease] = queue.Queue()

    def run() -> None:
        try:
            waiting.put(pending.wait(WAIT_S))
        except BaseException as error:
            waiting.put(error)

    threading.Thread(target=run, daemon=True).start()
    expire_session(b_client, zookeeper_hosts)
    assert isinstance(take(waiting, "B fenced"), Fenced)


def test_partition_leases_drain_per_partition(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    a = PartitionLeases(zk_client(), layout, "A")
    b = PartitionLeases(zk_client(), layout, "B")
    a_lease = a.acquire("pay.ments", 0, generation=1)
    assert b.acquire("pay.ments", 1, generation=1, timeout=1.0).member_id == "B"
    pending = b.begin("pay.ments", 0, generation=2)
    outcome: queue.Queue[Lease] = queue.Queue()
    threading.Thread(target=lambda: outcome.put(pending.wait(WAIT_S)), daemon=True).start()
    assert outcome.empty()
    a.release(a_lease)
    lease = take(outcome, "partition 0 for B")
    assert PartitionLeases.partition_of(lease) == ("pay.ments", 0)
    assert lease.token > a_lease.token
