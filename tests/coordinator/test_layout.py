"""The znode layout: names are safe and reversible, paths sort in slot order, ``ensure`` is
idempotent."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from coordinator.layout import (
    GroupLayout,
    decode_name,
    encode_name,
    format_partition,
    format_range,
    parse_partition,
    parse_range,
)
from keyshared.core.slots import SlotRange
from tests.coordinator.conftest import ClientFactory


@pytest.mark.parametrize(
    "text", ["orders", "a.b", ".", "..", "x/y", "100%", "a@b", "ünï cødé", "-_"]
)
def test_names_round_trip_and_stay_single_znode_names(text: str) -> None:
    name = encode_name(text)
    assert decode_name(name) == text
    assert "/" not in name and "@" not in name and name not in (".", "..")


def test_empty_name_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        encode_name("")


def test_ranges_sort_in_slot_order_and_round_trip() -> None:
    ranges = [SlotRange(10, 99), SlotRange(100, 999), SlotRange(1000, 65535), SlotRange(0, 9)]
    names = [format_range(r) for r in ranges]
    assert [parse_range(n) for n in sorted(names)] == sorted(ranges)


def test_partitions_round_trip_with_awkward_topics() -> None:
    for topic in ["payments", "eu.payments-v2", "a@b"]:
        assert parse_partition(format_partition(topic, 12)) == (topic, 12)


def test_paths_live_under_namespace_and_group() -> None:
    layout = GroupLayout("g 1", "/ns")
    assert layout.root == "/ns/groups/g%201"
    assert (
        len(
            {
                layout.members,
                layout.leader,
                layout.leases,
                layout.partition_leases,
                layout.cursors,
                layout.pins,
                layout.active,
                layout.assignment,
            }
        )
        == 8
    )
    with pytest.raises(ValueError, match="namespace"):
        GroupLayout("g", "ns/")


def test_ensure_is_idempotent(zk_client: ClientFactory, layout: GroupLayout) -> None:
    client: KazooClient = zk_client()
    layout.ensure(client)
    layout.ensure(client)
    assert sorted(client.get_children(layout.root)) == sorted(
        p.rsplit("/", 1)[1] for p in layout.directories
    )
