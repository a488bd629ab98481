"""A Kafka broker and a ZooKeeper server of their own, with a faulty link to each.

The partition tests cut one member off from one server while the rest of the group keeps
both. ZooKeeper clients connect to the address they are given, so a :class:`FaultyLink` in
front of ZooKeeper is enough. librdkafka does not: after bootstrapping it connects to the
address the broker *advertises*. The broker therefore gets an extra listener, ``PROXIED``,
advertised at the Kafka link's port; a member bootstrapped at the link reaches the broker
only through it, every other client uses the plain listener. This needs a broker of its own
(the session's broker has no such listener), started once for the directory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

import keyshared
from coordinator import ZooKeeperCoordinator
from keyshared.dev import LocalCluster
from keyshared.dev.ports import LOOPBACK, free_ports
from keyshared.dev.state import ClusterState, KafkaRecord, ZooKeeperRecord, save_state
from keyshared.dev.topics import create_topic, delete_topics, unique_name
from tests.coordinator.conftest import NAMESPACE
from tests.kafka.support.inprocess import FAST_RETRY, Running
from tests.partitions.proxy import FaultyLink

__all__ = ["Partitioned", "StartMember"]


@dataclass
class Partitioned:
    """The directory's servers: direct addresses, and the links a test may break."""

    bootstrap: str  # the plain listener: everyone but the member the test cuts off
    zookeeper: str
    kafka_link: FaultyLink  # bootstrap at ``kafka_link.address``: every connection goes through
    zookeeper_link: FaultyLink  # hosts ``zookeeper_link.address``


@pytest.fixture(scope="session")
def _partition_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Partitioned]:
    runtime = tmp_path_factory.mktemp("partition-cluster")
    broker, controller, zookeeper, proxied = free_ports(4)
    link = FaultyLink(f"{LOOPBACK}:{proxied}")
    # The ports are fixed before the start (the listeners name them): a state file that
    # records them makes the cluster use them, as after a restart.
    save_state(
        runtime / "cluster.json",
        ClusterState(KafkaRecord(broker, controller), ZooKeeperRecord(zookeeper)),
    )
    cluster = LocalCluster(
        runtime,
        kafka_heap_mb=512,
        kafka_overrides={
            "listeners": f"PLAINTEXT://{LOOPBACK}:{broker},CONTROLLER://{LOOPBACK}:{controller},"
            f"PROXIED://{LOOPBACK}:{proxied}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{broker},"
            f"PROXIED://{LOOPBACK}:{link.port}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
            "PROXIED:PLAINTEXT",
        },
    )
    try:
        status = cluster.up()
        assert status.kafka.address == f"{LOOPBACK}:{broker}", "the broker moved ports"
        assert status.zookeeper.address
        zk_link = FaultyLink(status.zookeeper.address)
        yield Partitioned(status.kafka.address, status.zookeeper.address, link, zk_link)
        zk_link.close()
    finally:
        link.close()
        cluster.down()


@pytest.fixture
def servers(_partition_servers: Partitioned) -> Iterator[Partitioned]:
    """The directory's servers; both links open at the start and healed after the test."""
    yield _partition_servers
    _partition_servers.kafka_link.heal()
    _partition_servers.zookeeper_link.heal()


StartMember = Callable[..., Running]


@pytest.fixture
def start(servers: Partitioned) -> Iterator[StartMember]:
    """``start(group, topic, handler, member, bootstrap=..., zookeeper=..., kafka={...},
    session_timeout=4.0, **options)``: an in-process member with its own Kafka clients and
    ZooKeeper session (``key_shared`` unless ``mode=`` says otherwise). ``bootstrap`` and
    ``zookeeper`` default to the direct addresses; pass a link's address to route through it.
    Every member is stopped after the test, with the links healed first."""
    started: list[Running] = []

    def start(
        group: str,
        topic: str,
        handler: Callable[..., object],
        member: str,
        *,
        bootstrap: str | None = None,
        zookeeper: str | None = None,
        kafka: dict[str, Any] | None = None,
        session_timeout: float = 4.0,
        **options: Any,
    ) -> Running:
        config = {
            "bootstrap.servers": bootstrap or servers.bootstrap,
            "group.id": group,
            "client.id": member,
            # The broker's minimum; also the bound after which a member that cannot reach
            # Kafka gives its ranges up (docs/guarantees.md, partial partitions).
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
            **(kafka or {}),
        }
        zk = ZooKeeperCoordinator(
            zookeeper or servers.zookeeper, namespace=NAMESPACE, session_timeout=session_timeout
        )
        options = {
            "workers": 4,
            "commit_interval": 0.2,
            "retry": FAST_RETRY,
            "mode": "key_shared",
            "drain_timeout": 5.0,
            **options,
        }
        run = Running(
            keyshared.KeySharedConsumer(config, [topic], handler, coordinator=zk, **options)
        )
        run.zk = zk  # type: ignore[attr-defined]  # the member's own session, for probes
        started.append(run)
        return run

    yield start
    servers.kafka_link.heal()
    servers.zookeeper_link.heal()
    for run in started:
        run.consumer.stop()
    for run in started:
        run.join()


@pytest.fixture
def topic(servers: Partitioned) -> Iterator[Callable[[int], str]]:
    """``topic(partitions)``: a fresh topic on the directory's broker, ready when returned."""
    admin = AdminClient({"bootstrap.servers": servers.bootstrap})
    created: list[str] = []

    def make(partitions: int) -> str:
        name = unique_name("part")
        create_topic(admin, name, partitions)
        created.append(name)
        return name

    yield make
    delete_topics(admin, created)


@pytest.fixture
def observer(servers: Partitioned) -> Iterator[KazooClient]:
    """A kazoo client of the test's own, connected directly, to look at the group's znodes."""
    client = KazooClient(hosts=servers.zookeeper)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()
