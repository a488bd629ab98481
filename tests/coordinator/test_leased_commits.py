"""A revoke while the ZooKeeper connection is down commits before it releases (issue 24,
defect 7; chaos finding 17).

Member A (``partition`` mode with leases) has finished every record of its partitions, none
committed yet (a long commit interval). Its ZooKeeper connection drops (a proxy cut; the session
lives on), and member B joins the group: A's revoke runs while its session is suspended. Before
the fix the final commit was refused ("the session may be gone") and the lease released once
the connection came back, so B started from the old committed offset and redid what A had
finished. Now the revoke waits for the session (bounded by its timeout) and commits first.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import pytest
from kazoo.client import KazooState
from prometheus_client import REGISTRY

from tests.coordinator.conftest import WAIT_S
from tests.coordinator.members import StartMember, members_for
from tests.coordinator.zk_proxy import ZooKeeperProxy
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.journal import produce

EAGER = {"partition.assignment.strategy": "range"}  # everything revoked when B joins
KEYS = [f"key-{i}".encode() for i in range(12)]


@pytest.fixture
def proxy(zookeeper_hosts: str) -> Iterator[ZooKeeperProxy]:
    p = ZooKeeperProxy(zookeeper_hosts)
    yield p
    p.close()


@pytest.fixture
def start_behind_proxy(kafka_bootstrap: str, proxy: ZooKeeperProxy) -> Iterator[StartMember]:
    yield from members_for(kafka_bootstrap, proxy.hosts)


def test_a_revoke_during_a_suspended_session_commits_before_it_releases(
    start_behind_proxy: StartMember,
    start: StartMember,
    proxy: ZooKeeperProxy,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
) -> None:
    topic = new_topic(2)  # type: ignore[operator]
    group = new_group("suspended-revoke")  # type: ignore[operator]
    produce(kafka_bootstrap, topic, [(key, 1) for key in KEYS])
    options = {"mode": "partition", "commit_interval": 600.0, "drain_timeout": 1.0}

    a_journal, b_journal = Recorder(pid=1), Recorder(pid=2)
    a = start_behind_proxy(
        group, topic, a_journal, member="A", session_timeout=20.0, kafka=EAGER, **options
    )
    wait_until(lambda: a_journal.finished() == len(KEYS), "A to finish every record", WAIT_S)

    proxy.cut()
    zk = a.zk  # type: ignore[attr-defined]
    wait_until(lambda: zk.client.state == KazooState.SUSPENDED, "A's session to suspend", WAIT_S)
    start(group, topic, b_journal, member="B", kafka=EAGER, **options)
    revoked = {"group": group, "member": "A", "kind": "revoked"}
    wait_until(
        lambda: (REGISTRY.get_sample_value("keyshared_rebalances_total", revoked) or 0) >= 1,
        "A's revoke (while its ZooKeeper connection is down)",
        WAIT_S * 2,
    )
    proxy.restore()

    # A record after everything A finished, on B's partition (range: A gets 0, B gets 1), of
    # a key A ran there: once B has run it, B has run every earlier record of that key it
    # was going to run (per-key order).
    key = next(k for k in KEYS if zlib.crc32(k) % 2 == 1)
    produce(kafka_bootstrap, topic, [(key, 2)])
    wait_until(
        lambda: any(e.key == key and e.seq == 2 and e.kind == "E" for e in b_journal.snapshot()),
        "B to run the record produced after the hand-over",
        WAIT_S * 3,
    )
    redone = sorted({(e.key, e.seq) for e in b_journal.snapshot() if e.seq == 1})
    assert redone == [], f"B redid records A had finished (its final commit was refused): {redone}"
