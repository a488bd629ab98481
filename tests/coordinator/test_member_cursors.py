"""A member's cursor writes: every range it holds in one ZooKeeper transaction per flush, each
fenced by its own lease; and a member's re-read reads only the cursors overlapping its ranges.

At 100 members a transaction per range per commit interval outgrew one ZooKeeper server's
write rate many times over, and every re-read read every cursor of the group.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.client import KazooClient

from coordinator import cursors as cursors_module
from coordinator.cursors import CursorWriter, flush_together, read_cursors
from coordinator.errors import Fenced
from coordinator.layout import GroupLayout
from coordinator.leases import RangeLeases
from keyshared.core.offsets import encode_within
from keyshared.core.runs import OffsetRuns
from keyshared.core.slots import SlotRange
from keyshared.modes.claims_reader import ClaimsReader
from keyshared.modes.range_cursors import metadata_budget
from tests.coordinator.conftest import ClientFactory

RANGES = [SlotRange(0, 99), SlotRange(100, 199), SlotRange(200, 299)]


class Transactions:
    """Counts the ``multi`` transactions a client commits."""

    def __init__(self, client: KazooClient, monkeypatch: pytest.MonkeyPatch) -> None:
        self.committed = 0
        make: Callable[[], Any] = client.transaction

        def counted() -> Any:
            transaction = make()
            commit = transaction.commit

            def commit_counted() -> list[Any]:
                self.committed += 1
                return commit()  # type: ignore[no-any-return]

            transaction.commit = commit_counted
            return transaction

        monkeypatch.setattr(client, "transaction", counted)


@dataclass
class Member:
    """One member's session holding RANGES, a cursor writer each, its transactions counted."""

    client: KazooClient
    layout: GroupLayout
    leases: RangeLeases
    writers: list[CursorWriter]
    transactions: Transactions


@pytest.fixture
def member(
    zk_client: ClientFactory, layout: GroupLayout, monkeypatch: pytest.MonkeyPatch
) -> Member:
    client = zk_client()
    leases = RangeLeases(client, layout, "A")
    writers = [
        CursorWriter(client, layout, leases.acquire(slots, generation=1)) for slots in RANGES
    ]
    return Member(client, layout, leases, writers, Transactions(client, monkeypatch))


def stage(writers: list[CursorWriter], offset: int, partitions: int = 4) -> None:
    for writer in writers:
        for partition in range(partitions):
            writer.stage("payments", partition, offset + partition)


def test_one_flush_writes_every_range_in_one_transaction(
    member: Member,
) -> None:
    client, layout, held, transactions = (
        member.client,
        member.layout,
        member.writers,
        member.transactions,
    )
    stage(held, 100)
    report = flush_together(held)
    assert report.written == dict.fromkeys(RANGES, 4)
    assert not report.fenced and not report.failed
    assert (transactions.committed, report.transactions) == (1, 1)
    stored = read_cursors(client, layout)
    assert len(stored) == 12 and len({c.version for c in stored}) == 1, "not one transaction"

    stage(held, 200)  # the next interval: the znodes exist now (set, not create)
    assert flush_together(held).written == dict.fromkeys(RANGES, 4)
    assert transactions.committed == 2
    assert {c.offset for c in read_cursors(client, layout)} == {200, 201, 202, 203}
    assert flush_together(held).transactions == 0, "nothing staged: no write at all"


def test_a_released_lease_among_three_writes_nothing_and_the_others_are_written(
    member: Member,
) -> None:
    client, layout, leases, held = member.client, member.layout, member.leases, member.writers
    stage(held, 100)
    assert len(flush_together(held).written) == 3
    transactions = member.transactions
    transactions.committed = 0
    leases.release(held[1].lease)  # the middle range is gone: its writer is a zombie
    stage(held, 500)
    report = flush_together(held)
    assert list(report.fenced) == [RANGES[1]]
    assert held[1].lease.path in str(report.fenced[RANGES[1]])
    assert report.written == {RANGES[0]: 4, RANGES[2]: 4}
    assert not report.failed
    assert held[1].pending == 0, "a fenced range drops what it staged"
    assert transactions.committed == 2, "one try with the fenced range, one without"
    stored = {(c.slots, c.partition): c.offset for c in read_cursors(client, layout)}
    for partition in range(4):
        assert stored[(RANGES[0], partition)] == 500 + partition
        assert stored[(RANGES[1], partition)] == 100 + partition, "a fenced range wrote"
        assert stored[(RANGES[2], partition)] == 500 + partition
    held[1].stage("payments", 0, 900)
    with pytest.raises(Fenced):  # alone, as before
        held[1].flush()


@pytest.mark.parametrize("per_transaction", [1, 2])
def test_a_flush_past_the_size_bound_is_split_between_ranges_never_within_one(
    member: Member, monkeypatch: pytest.MonkeyPatch, per_transaction: int
) -> None:
    """ZooKeeper refuses a request over ``jute.maxbuffer`` (about 1 MB): a member holding many
    ranges with large cursors writes them in as few transactions as fit the bound, as many
    whole ranges in each as fit, and never one range's cursors over two."""
    client, layout, held = member.client, member.layout, member.writers
    for writer in held:
        for partition in range(8):
            writer.stage("payments", partition, 7, metadata="x" * 100)
    one_range = cursors_module._Batch(held[0], dict(held[0]._staged)).size
    bound = per_transaction * one_range + one_range // 2  # room for k ranges, not k + 1
    monkeypatch.setattr(cursors_module, "MAX_TRANSACTION_BYTES", bound)
    report = flush_together(held)
    assert report.written == dict.fromkeys(RANGES, 8)
    expected = -(-len(RANGES) // per_transaction)  # 3 ranges: 3 transactions, or 2 + 1
    assert report.transactions == expected
    versions: dict[SlotRange, set[int]] = {}
    for cursor in read_cursors(client, layout):
        versions.setdefault(cursor.slots, set()).add(cursor.version)
    assert all(len(v) == 1 for v in versions.values()), "a range split over transactions"
    by_version: dict[int, int] = {}
    for (version,) in versions.values():
        by_version[version] = by_version.get(version, 0) + 1
    assert sorted(by_version.values(), reverse=True) == [
        min(per_transaction, len(RANGES) - i * per_transaction) for i in range(expected)
    ]


def test_a_member_gaining_a_range_reads_only_the_cursors_overlapping_it(
    zk_client: ClientFactory, layout: GroupLayout
) -> None:
    """A group keeps a cursor per range shape and partition; a member's re-read read all of
    them. Ranges that cannot overlap what it holds cannot change its claims."""
    client = zk_client()
    leases = RangeLeases(client, layout, "A")
    for i in range(10):  # ten other ranges' cursors, two partitions each
        writer = CursorWriter(
            client, layout, leases.acquire(SlotRange(100 * i, 100 * i + 99), generation=1)
        )
        writer.stage("payments", 0, 10 * i)
        writer.stage("payments", 1, 10 * i + 1)
        writer.flush()

    reader_client = zk_client()
    read: list[str] = []
    for name in ("get_async", "get_children_async", "get", "get_children"):
        call = getattr(reader_client, name)

        def recorded(path: str, *args: Any, _call: Any = call, **kwargs: Any) -> Any:
            read.append(path)
            return _call(path, *args, **kwargs)

        setattr(reader_client, name, recorded)
    topics = SimpleNamespace(
        read=lambda consumer: {},
        incarnations=dict,
        split=lambda cursors: (list(cursors), []),
        bases=lambda consumer, committed, reset: {("payments", 0): 0, ("payments", 1): 0},
    )
    zk = SimpleNamespace(client=reader_client, layout=lambda group: layout)
    reader = ClaimsReader(zk, "g", topics, {}, "B")  # type: ignore[arg-type]

    gained = SlotRange(250, 349)  # overlaps 200-299 and 300-399
    claims = reader.read(None, [(gained, 99)])  # type: ignore[arg-type]
    assert [(p.slots, p.start) for p in claims[("payments", 0)].pieces] == [
        (SlotRange(250, 299), 20),
        (SlotRange(300, 349), 30),
    ]
    cursor_reads = [path for path in read if path.startswith(layout.cursors + "/")]
    overlapping = [
        layout.cursor_range(SlotRange(200, 299)),
        layout.cursor_range(SlotRange(300, 399)),
    ]
    outside = [
        p for p in cursor_reads if not any(p == d or p.startswith(d + "/") for d in overlapping)
    ]
    assert outside == [], f"read {len(outside)} cursor znode(s) no held range overlaps"
    assert len(cursor_reads) == 6  # two range listings, two cursors each


def test_a_member_writes_the_cursors_of_all_its_ranges_in_one_transaction_per_interval(
    member: Member,
) -> None:
    """The member side: a commit interval of a member holding three ranges, one of them
    fenced in the second interval (reported, forgotten; the other two written)."""
    from keyshared.core.claims import PartitionClaims
    from keyshared.core.runs import OffsetRuns
    from keyshared.modes.handback import HandBack
    from keyshared.modes.held_ranges import HeldRanges

    client, layout, leases, made = member.client, member.layout, member.leases, member.writers
    by_lease = {writer.lease.path: writer for writer in made}
    fenced: list[str] = []
    hand_back = HandBack(SimpleNamespace(running=lambda _states: 0), lambda: True)  # type: ignore[arg-type]
    held = HeldRanges(
        leases, lambda lease: by_lease[lease.path], lambda: fenced.append("fenced"), hand_back
    )
    for writer in made:
        held.holdings.want(str(writer.slots))
        held.add(writer.slots, writer.lease)
    tps = [("payments", p) for p in range(4)]
    claims = {tp: PartitionClaims.resolve(held.tokens(), [], base=0) for tp in tps}
    transactions = member.transactions

    progress = [(tp, 100, OffsetRuns.coerce([]), 100) for tp in tps]
    assert held.write(progress, claims, force=False, suspended=False) == (True, [])
    assert transactions.committed == 1, "a transaction per range"
    assert {(c.slots, c.offset) for c in read_cursors(client, layout)} == {
        (slots, 100) for slots in RANGES
    }

    leases.release(made[0].lease)
    progress = [(tp, 200, OffsetRuns.coerce([]), 200) for tp in tps]
    assert held.write(progress, claims, force=False, suspended=False) == (False, [RANGES[0]])
    assert RANGES[0] not in held and fenced == ["fenced"]
    assert {(c.slots, c.offset) for c in read_cursors(client, layout)} == {
        (RANGES[0], 100),
        (RANGES[1], 200),
        (RANGES[2], 200),
    }


def test_a_cursor_collected_under_one_range_is_created_again_with_the_others(
    member: Member,
) -> None:
    """The leader's pass deletes superseded cursors, directories too; the writer of one range
    learns it from the failed transaction and the same flush writes every range."""
    client, layout, held = member.client, member.layout, member.writers
    stage(held, 100)
    assert len(flush_together(held).written) == 3
    client.delete(layout.cursor_range(RANGES[2]), recursive=True)
    member.transactions.committed = 0
    stage(held, 200)
    report = flush_together(held)
    assert report.written == dict.fromkeys(RANGES, 4) and not report.failed
    assert member.transactions.committed == 2, "one try, one after learning the znode went"
    assert {(c.slots, c.offset) for c in read_cursors(client, layout) if c.partition == 0} == {
        (slots, 200) for slots in RANGES
    }


@given(st.lists(st.integers(1, 700), max_size=30), st.integers(100, 1000))
def test_ranges_are_split_over_transactions_only_past_the_bound(
    sizes: list[int], bound: int
) -> None:
    """In order, whole ranges, every transaction within the bound unless one range alone is
    larger, and a new transaction only when the next range would not fit."""
    batches = [SimpleNamespace(size=size) for size in sizes]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cursors_module, "MAX_TRANSACTION_BYTES", bound)
        chunks = cursors_module._chunks(batches)  # type: ignore[arg-type]
    assert [b for chunk in chunks for b in chunk] == batches
    for i, chunk in enumerate(chunks):
        total = sum(b.size for b in chunk)
        assert chunk and (total <= bound or len(chunk) == 1)
        if i + 1 < len(chunks):
            assert total + chunks[i + 1][0].size > bound


def test_a_range_of_many_partitions_with_full_metadata_still_fits_one_transaction(
    member: Member,
) -> None:
    """A range's cursors go in one ``multi``, which ZooKeeper takes only whole and under about
    1 MB. At 60 KB of metadata a cursor, 24 partitions made a request the server refused on
    every flush, and the range could never be handed back: the metadata is now shared out
    per partition (``metadata_budget``) so that the range's flush fits."""
    rng = random.Random(24)
    partitions = 24
    budget = metadata_budget(partitions)
    runs, at = [], 1
    while at < 400_000:  # irregular runs: nothing for the codec to fold
        runs.append((at, at + rng.randint(1, 9)))
        at = runs[-1][1] + rng.randint(1, 9)
    metadata = encode_within(0, OffsetRuns.from_runs(runs), budget).text
    assert budget * 0.9 <= len(metadata) <= budget, "the test meant full cursors"
    writer = member.writers[0]
    for partition in range(partitions):
        writer.stage("payments", partition, 0, metadata)
    report = flush_together([writer])
    assert report.written == {RANGES[0]: partitions}, report
    stored = [c for c in read_cursors(member.client, member.layout) if c.slots == RANGES[0]]
    assert len(stored) == partitions
