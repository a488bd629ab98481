"""Fenced cursors: writes succeed only through a lease that still exists; a batch is one
ZooKeeper write; a new owner starts from the lowest overlapping cursor."""

from __future__ import annotations

import pytest

from coordinator.cursors import CursorWriter, delete_superseded, read_cursors, start_positions
from coordinator.errors import Fenced
from coordinator.layout import GroupLayout
from coordinator.leases import RangeLeases
from keyshared.core.slots import SlotRange
from tests.coordinator.conftest import WAIT_S, ClientFactory, expire_session

HALF = SlotRange(0, 32767)


def test_a_zombie_is_fenced_and_the_new_owner_writes(
    zk_client: ClientFactory, layout: GroupLayout, zookeeper_hosts: str
) -> None:
    a_client, b_client = zk_client(), zk_client()
    a_lease = RangeLeases(a_client, layout, "A").acquire(HALF, generation=1)
    a_writer = CursorWriter(a_client, layout, a_lease)
    a_writer.stage("payments", 0, 100)
    assert a_writer.flush() == 1

    expire_session(a_client, zookeeper_hosts)  # A paused past its session: now a zombie
    b_lease = RangeLeases(b_client, layout, "B").acquire(HALF, generation=2, timeout=WAIT_S)
    b_writer = CursorWriter(b_client, layout, b_lease)
    assert start_positions(b_client, layout, HALF)[("payments", 0)].offset == 100

    a_writer.stage("payments", 0, 150)  # A's client reconnected with a new session
    with pytest.raises(Fenced) as caught:
        a_writer.flush()
    assert a_lease.path in str(caught.value)
    assert a_writer.pending == 0  # a fenced writer drops what it staged

    b_writer.stage("payments", 0, 120)
    assert b_writer.flush() == 1
    (cursor,) = read_cursors(b_client, layout)
    assert (cursor.offset, cursor.member_id, cursor.token) == (120, "B", b_lease.token)


def test_a_released_lease_fences_its_own_writer(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    client = zk_client()
    leases = RangeLeases(client, layout, "A")
    lease = leases.acquire(HALF, generation=1)
    writer = CursorWriter(client, layout, lease)
    leases.release(lease)
    again = leases.acquire(HALF, generation=2)  # same range, same member: a new znode
    writer.stage("payments", 0, 1)
    with pytest.raises(Fenced):
        writer.flush()
    assert again.path != lease.path


def test_a_batch_of_cursors_is_one_zookeeper_write(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    client = zk_client()
    lease = RangeLeases(client, layout, "A").acquire(HALF, generation=1)
    writer = CursorWriter(client, layout, lease)
    for partition in range(50):
        writer.stage("payments", partition, 10)
        writer.stage("payments", partition, 1000 + partition)  # the latest stage wins
    assert writer.flush() == 50
    for partition in range(50):
        writer.stage("payments", partition, 2000 + partition, metadata=f"m{partition}")
    assert writer.flush() == 50
    assert writer.flush() == 0  # nothing staged: no write at all

    zxids = {client.exists(layout.cursor(HALF, "payments", p)).mzxid for p in range(50)}
    assert len(zxids) == 1, "the 50 cursors were not written by one transaction"
    cursors = read_cursors(client, layout)
    assert [(c.partition, c.offset, c.metadata) for c in cursors] == sorted(
        (p, 2000 + p, f"m{p}") for p in range(50)
    )


def test_new_owner_starts_from_the_lowest_overlapping_cursor(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    client = zk_client()
    leases = RangeLeases(client, layout, "A")
    for slots, offset in ((SlotRange(0, 99), 500), (SlotRange(100, 199), 300)):
        writer = CursorWriter(client, layout, leases.acquire(slots, generation=1))
        writer.stage("t", 0, offset)
        writer.stage("t", 1, offset + 1)
        writer.flush()
    merged = start_positions(client, layout, SlotRange(50, 150))
    assert {k: c.offset for k, c in merged.items()} == {("t", 0): 300, ("t", 1): 301}
    only_first = start_positions(client, layout, SlotRange(0, 10))
    assert only_first[("t", 0)].offset == 500
    assert start_positions(client, layout, SlotRange(1000, 2000)) == {}


def test_a_new_owner_of_a_range_with_many_stored_cursors_writes_at_once(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    """The next holder of a range shape finds a cursor znode per partition already there. Its
    first flush must go through: the chaos run found every new holder failing its first N-1
    flushes (ZooKeeper answers the ops after a multi's first failure with RuntimeInconsistency,
    which the writer raised), so members re-read stale cursors and replayed records."""
    client = zk_client()
    leases = RangeLeases(client, layout, "A")
    first = leases.acquire(HALF, generation=1)
    writer = CursorWriter(client, layout, first)
    for partition in range(6):
        writer.stage("t", partition, 100 + partition)
    assert writer.flush() == 6
    leases.release(first)

    second = RangeLeases(client, layout, "B").acquire(HALF, generation=2)
    successor = CursorWriter(client, layout, second)
    for partition in (2, 0, 5, 1, 4, 3, 6):  # six stored, one new, in no particular order
        successor.stage("t", partition, 200 + partition)
    assert successor.flush() == 7
    assert successor.pending == 0
    assert [(c.partition, c.offset, c.member_id) for c in read_cursors(client, layout)] == [
        (p, 200 + p, "B") for p in range(7)
    ]


def test_a_range_written_piece_by_piece_then_whole_resolves_to_its_latest_write(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    """A range put together from pieces that resume at different points is written one cursor
    per piece (with the range's token) until its window has read past them, then whole. The
    pieces and the whole range share a token: the later write must win, or a re-read would
    resume the pieces from their older cursors and replay what the whole range said was done."""
    from keyshared.core.claims import PartitionClaims
    from keyshared.modes.range_cursors import stored_cursors

    client = zk_client()
    lease = RangeLeases(client, layout, "A").acquire(HALF, generation=1)
    writer = CursorWriter(client, layout, lease)
    left, right = SlotRange(0, 99), SlotRange(100, 32767)
    with pytest.raises(ValueError, match="outside"):
        writer.stage_pieces("payments", 0, [(SlotRange(0, 40000), 1, "")])
    writer.stage_pieces("payments", 0, [(left, 500, ""), (right, 480, "")])
    assert writer.flush() == 2
    pieces = read_cursors(client, layout)
    assert {(c.slots, c.offset, c.token) for c in pieces} == {
        (left, 500, lease.token),
        (right, 480, lease.token),
    }
    assert len({c.version for c in pieces}) == 1, "one transaction, one version"

    writer.stage("payments", 0, 520)
    assert writer.flush() == 1
    stored = stored_cursors(read_cursors(client, layout))[("payments", 0)]
    claims = PartitionClaims.resolve([(HALF, lease.token + 1)], stored, base=0)
    assert [(p.slots, p.start) for p in claims.pieces] == [(HALF, 520)], (
        "an older piece cursor of the same lease won over the later whole-range cursor"
    )


def test_superseded_cursors_are_collected_and_their_writers_recreate_them(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    """Each range shape keeps its own cursors and a group collects thousands of them (the
    30-minute chaos run: 1,434 range directories; every re-read read them all, 2.7 s at the
    end). Those no slot resolves to any more go, with the directories they leave empty; a
    writer whose cursor was collected writes it again; one written again since stays."""
    client = zk_client()
    leases = RangeLeases(client, layout, "A")
    old = leases.acquire(SlotRange(0, 199), generation=1)
    old_writer = CursorWriter(client, layout, old)
    old_writer.stage("payments", 0, 100)
    old_writer.flush()
    leases.release(old)
    lease = leases.acquire(HALF, generation=2)
    writer = CursorWriter(client, layout, lease)
    left, right = SlotRange(0, 99), SlotRange(100, 32767)
    writer.stage_pieces("payments", 0, [(left, 500, ""), (right, 480, "")])
    writer.flush()
    writer.stage("payments", 0, 520)
    writer.flush()
    before = read_cursors(client, layout)
    assert len(before) == 4

    assert delete_superseded(client, layout, before) == 3
    (kept,) = read_cursors(client, layout)
    assert (kept.slots, kept.offset) == (HALF, 520)
    assert client.get_children(layout.cursors) == [layout.cursor_range(HALF).rsplit("/", 1)[1]]

    writer.stage_pieces("payments", 0, [(left, 530, ""), (right, 525, "")])
    assert writer.flush() == 2, "the pieces' cursors and directories were collected"
    newer = read_cursors(client, layout)
    writer.stage("payments", 0, 540)  # written after the collector read: it must stay
    writer.flush()
    assert delete_superseded(client, layout, newer) == 0
    assert {(c.slots, c.offset) for c in read_cursors(client, layout)} == {
        (HALF, 540),
        (left, 530),
        (right, 525),
    }
