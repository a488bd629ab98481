"""Exactly-once outputs behind the coordinator's fences (issue 26): partition mode with
partition leases and ZooKeeper exclusive mode commit their transactions through the
coordinator's cursor store, which checks the lease (or the active lock) first."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest

from coordinator import ZooKeeperCoordinator
from keyshared import KeySharedConsumer
from tests.coordinator.conftest import NAMESPACE
from tests.kafka.support.journal import produce, sequenced
from tests.kafka.test_exactly_once import _committed_to_end, assert_exactly_once, read_committed


@pytest.mark.parametrize("mode", ["partition", "exclusive"])
def test_coordinated_modes_commit_outputs_exactly_once(
    kafka_bootstrap: str, zookeeper_hosts: str, new_topic, new_group, mode: str
) -> None:
    source = new_topic(partitions=2)
    out = new_topic(partitions=2)
    group = new_group(f"eos-zk-{mode}")
    records = sequenced([f"k{i:02d}".encode() for i in range(30)], 20)
    produce(kafka_bootstrap, source, records)

    def handle(record) -> None:  # type: ignore[no-untyped-def]
        record.output.produce(out, key=record.raw_key, value=record.value)

    zk = ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE, session_timeout=5)
    consumer = KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group},
        [source],
        handle,
        coordinator=zk,
        mode=mode,
        workers=8,
        exactly_once=True,
        commit_interval=0.2,
        **({"poison": "block"} if mode == "exclusive" else {}),
    )
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        _committed_to_end(kafka_bootstrap, group, source, 60)
    finally:
        consumer.stop()
        thread.join(30)
    assert not thread.is_alive()
    expected: dict[bytes | None, list[int]] = defaultdict(list)
    for k, s in records:
        expected[k].append(s)
    assert_exactly_once(read_committed(kafka_bootstrap, out, len(records)), expected)
