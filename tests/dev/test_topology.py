"""The production topology on loopback: three Kafka nodes and a three-member ZooKeeper ensemble
(`TopologyCluster`, `keyshared dev up --brokers 3 --zookeepers 3`), issue 27 part 1.

The configs are checked without a server; the rest runs on the session's `topology_cluster`:
topics default to RF 3 / min ISR 2, an `acks=all` producer keeps writing through the SIGKILL of
a partition's leader, a kazoo session survives the SIGKILL of the ZooKeeper leader, and the CLI
reads the folder's topology.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from kazoo.client import KazooClient, KazooState

from keyshared.cli.dev import dev
from keyshared.dev import BOOTSTRAP_ENV, ZOOKEEPER_ENV, kafka, zookeeper
from keyshared.dev.files import ServerFiles
from keyshared.dev.topics import create_topic, delete_topics, unique_name
from keyshared.dev.topology import TopologyCluster
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(240)


def test_a_three_node_broker_is_one_voter_of_three_and_defaults_to_rf3_min_isr2(
    tmp_path: Path,
) -> None:
    files = ServerFiles.in_runtime(tmp_path, "kafka-2", "server.properties")
    settings = kafka.broker_settings(
        files, 101, 201, node_id=2, voters={1: 200, 2: 201, 3: 202}, replicas=3
    )
    assert settings["node.id"] == "2"
    assert settings["controller.quorum.voters"] == (
        "1@127.0.0.1:200,2@127.0.0.1:201,3@127.0.0.1:202"
    )
    assert settings["process.roles"] == "broker,controller"
    for key in ("default.replication.factor", "offsets.topic.replication.factor"):
        assert settings[key] == "3"
    assert settings["min.insync.replicas"] == settings["transaction.state.log.min.isr"] == "2"
    single = kafka.broker_settings(files, 101, 201)
    assert single["controller.quorum.voters"] == "1@127.0.0.1:201"
    assert single["min.insync.replicas"] == "1" and "broker.session.timeout.ms" not in single


def test_an_ensemble_member_lists_every_peer_and_writes_its_myid(tmp_path: Path) -> None:
    files = ServerFiles.in_runtime(tmp_path, "zookeeper-3", "zoo.cfg")
    peers = [zookeeper.EnsemblePeer(i, 100 + i, 200 + i, 300 + i) for i in (1, 2, 3)]
    zookeeper.write_config(files, 103, me=peers[2], peers=peers)
    config = files.config.read_text()
    for i in (1, 2, 3):
        assert f"server.{i}=127.0.0.1:{200 + i}:{300 + i}:participant" in config
    assert "clientPort=103" in config and "srvr" in config
    assert (files.data / "myid").read_text().strip() == "3"
    command = zookeeper.server_command("java", tmp_path, files, 128, ensemble=True)
    assert "org.apache.zookeeper.server.quorum.QuorumPeerMain" in command


def test_every_node_answers_and_the_env_names_all_of_them(
    topology_cluster: TopologyCluster,
) -> None:
    status = topology_cluster.status()
    assert status.ready, status
    assert len(status.brokers) == 3 and len(status.zookeepers) == 3
    assert sorted(status.roles.values()) == ["follower", "follower", "leader"]
    env = status.env()
    assert len(env[BOOTSTRAP_ENV].split(",")) == 3
    assert len(env[ZOOKEEPER_ENV].split(",")) == 3
    ports = {s.address for s in (*status.brokers, *status.zookeepers)}
    assert len(ports) == 6, "every node has its own port"
    homes = {s.log_file for s in (*status.brokers, *status.zookeepers)}
    assert len(homes) == 6, "every node has its own files"


def test_the_cli_reads_the_folders_topology(topology_cluster: TopologyCluster) -> None:
    runner = CliRunner()
    folder = str(topology_cluster.runtime_dir)
    env = runner.invoke(dev, ["env", "--runtime-dir", folder])
    assert env.exit_code == 0, env.output
    assert f"export {BOOTSTRAP_ENV}={topology_cluster.bootstrap_servers}" in env.output
    status = runner.invoke(dev, ["status", "--runtime-dir", folder])
    assert status.exit_code == 0, status.output
    other_sizes = runner.invoke(dev, ["up", "--runtime-dir", folder, "--brokers", "2"])
    assert other_sizes.exit_code == 1
    assert "holds 3 broker(s)" in other_sizes.output


def test_acks_all_writes_go_on_through_a_leader_crash(topology_cluster: TopologyCluster) -> None:
    admin = AdminClient({"bootstrap.servers": topology_cluster.bootstrap_servers})
    topic = unique_name("topo")
    create_topic(admin, topic, 3, replication_factor=-1)  # the brokers' default
    try:
        partition = admin.list_topics(topic=topic, timeout=10).topics[topic].partitions[0]
        assert len(partition.replicas) == 3 and len(partition.isrs) == 3
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        config = admin.describe_configs([resource])[resource].result(timeout=10)
        assert config["min.insync.replicas"].value == "2"

        producer = Producer({
            "bootstrap.servers": topology_cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "log_level": 2,
        })  # fmt: skip
        failures: list[str] = []
        delivered = threading.Semaphore(0)

        def on_delivery(err: object, _msg: object) -> None:
            if err is not None:
                failures.append(str(err))
            delivered.release()

        leader = topology_cluster.partition_leader(topic, 0)
        for i in range(50):
            producer.produce(topic, str(i).encode(), partition=0, on_delivery=on_delivery)
        producer.flush(30)
        topology_cluster.stop_broker(leader, kill=True)
        for i in range(50, 100):
            producer.produce(topic, str(i).encode(), partition=0, on_delivery=on_delivery)
        assert producer.flush(60) == 0, "writes stalled with one of three replicas down"
        assert not failures, failures
        assert topology_cluster.partition_leader(topic, 0) != leader
        topology_cluster.start_broker(leader)
        topology_cluster.await_in_sync()
        low, high = _watermarks(topology_cluster.bootstrap_servers, topic)
        assert (low, high) == (0, 100)
    finally:
        delete_topics(admin, [topic])


def test_a_kazoo_session_outlives_the_ensemble_leaders_crash(
    topology_cluster: TopologyCluster,
) -> None:
    roles = topology_cluster.zookeeper_roles()
    leader = next(node for node, role in roles.items() if role == "leader")
    client = KazooClient(hosts=topology_cluster.zookeeper_hosts, timeout=6.0)
    states: list[str] = []
    client.add_listener(lambda state: states.append(state))
    client.start(timeout=15)
    try:
        path = client.create(f"/{unique_name('topo')}", b"x", ephemeral=True)
        session = client.client_id
        topology_cluster.stop_zookeeper_node(leader, kill=True)
        # kazoo's retry: a request during the election fails with ConnectionLoss, then moves on
        assert client.retry(client.exists, path) is not None
        assert client.client_id == session, "the session moved, it did not expire"
        assert KazooState.LOST not in states
        # The survivors answer the role query once their election is over (a loaded machine
        # can take a while): wait for a leader among them, not for one instant's answer.
        new_roles: dict[int, str] = {}

        def elected() -> bool:
            new_roles.clear()
            new_roles.update(topology_cluster.zookeeper_roles())
            return "leader" in new_roles.values()

        wait_until(elected, "a new ZooKeeper leader among the survivors", 60)
        assert leader not in new_roles
    finally:
        client.stop()
        client.close()
        topology_cluster.start_zookeeper_node(leader)
    assert topology_cluster.status().ready


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("wm")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()
