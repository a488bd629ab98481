"""Launch one node of a `TopologyCluster` and wait until it has joined its cluster.

A Kafka node is ready when its own metadata lists itself (it registered with the controller
quorum and was unfenced, not only opened its port); a ZooKeeper member when `srvr` says it is
leader or follower (it joined a quorum; `ruok` answers without one).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from keyshared.dev import kafka, process, zookeeper
from keyshared.dev.files import ServerFiles
from keyshared.dev.jars import fetch_jars
from keyshared.dev.launch import await_answer
from keyshared.dev.ports import LOOPBACK, accepts_connections
from keyshared.dev.tools import find_java
from keyshared.dev.topology_state import BrokerNode, TopologyState, ZooKeeperNode

__all__ = ["NodeLauncher", "lists_itself", "quiet_client"]

log = logging.getLogger(__name__)
# Probes of a node that is down or starting must not print librdkafka's connection errors.
_quiet = logging.getLogger("keyshared.dev.topology.probe")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


class NodeLauncher:
    """Starts the nodes of one topology folder and awaits them; `TopologyCluster` owns the
    settings, this class only applies them.

    :param runtime_dir: the topology's folder.
    :param save: writes the state file; called as soon as a pid is known.
    :param replicas: the brokers' default replication factor (min ISR one less).
    """

    def __init__(
        self,
        runtime_dir: Path,
        *,
        save: Callable[[TopologyState], None],
        jar_cache: Path | None,
        start_timeout: float,
        kafka_heap_mb: int,
        zookeeper_heap_mb: int,
        kafka_overrides: Mapping[str, str],
        replicas: int,
    ) -> None:
        self._runtime_dir = runtime_dir
        self._save = save
        self._jar_cache = jar_cache
        self._start_timeout = start_timeout
        self._kafka_heap_mb = kafka_heap_mb
        self._zookeeper_heap_mb = zookeeper_heap_mb
        self._kafka_overrides = dict(kafka_overrides)
        self._replicas = replicas

    def files(self, node: BrokerNode | ZooKeeperNode) -> ServerFiles:
        config = "server.properties" if isinstance(node, BrokerNode) else "zoo.cfg"
        return ServerFiles.in_runtime(self._runtime_dir, node.name, config)

    def running(self, node: BrokerNode | ZooKeeperNode) -> bool:
        return node.pid is not None and process.is_running(node.pid, self.files(node).marker)

    def start_broker(
        self, state: TopologyState, node: BrokerNode, abort: threading.Event, started: list[str]
    ) -> None:
        """Start ``node`` unless it runs (formatting its storage on first use), then await it;
        append its name to ``started`` once the process exists."""
        files = self.files(node)
        if not self.running(node):
            java, jars = find_java(), fetch_jars(self._jar_cache)
            voters = {broker.node_id: broker.controller_port for broker in state.brokers}
            kafka.write_config(
                files,
                node.port,
                node.controller_port,
                self._kafka_overrides,
                node_id=node.node_id,
                voters=voters,
                replicas=self._replicas,
            )
            if not kafka.is_formatted(files):
                kafka.format_storage(java, jars, files, state.cluster_id)
            if abort.is_set():
                return
            command = kafka.server_command(java, jars, files, self._kafka_heap_mb)
            node.pid = process.spawn(command, files.console_file, files.home)
            started.append(node.name)
            self._save(state)
            log.info("started %s pid %d on %s:%d", node.name, node.pid, LOOPBACK, node.port)
        assert node.pid is not None
        await_answer(
            f"Kafka node {node.node_id}",
            node.pid,
            files.marker,
            lambda: lists_itself(node.port, node.node_id),
            (files.log_file, files.console_file),
            abort,
            self._start_timeout,
        )

    def start_zookeeper(
        self, state: TopologyState, node: ZooKeeperNode, abort: threading.Event, started: list[str]
    ) -> None:
        """Start ``node`` unless it runs, then await it; see :meth:`start_broker`."""
        files = self.files(node)
        if not self.running(node):
            java, jars = find_java(), fetch_jars(self._jar_cache)
            zookeeper.write_config(
                files, node.port, me=node.peer, peers=[member.peer for member in state.zookeepers]
            )
            command = zookeeper.server_command(
                java, jars, files, self._zookeeper_heap_mb, ensemble=True
            )
            node.pid = process.spawn(command, files.console_file, files.home)
            started.append(node.name)
            self._save(state)
            log.info("started %s pid %d on %s:%d", node.name, node.pid, LOOPBACK, node.port)
        assert node.pid is not None
        await_answer(
            f"ZooKeeper member {node.node_id}",
            node.pid,
            files.marker,
            lambda: zookeeper.server_mode(node.port) in ("leader", "follower"),
            (files.log_file, files.console_file),
            abort,
            self._start_timeout,
        )


def lists_itself(port: int, node_id: int, timeout: float = 2.0) -> bool:
    """Whether the broker on ``port`` answers a metadata request that lists itself (it
    registered with the controller quorum and is unfenced, not only listening)."""
    if not accepts_connections(port):
        return False
    admin = AdminClient(quiet_client(f"{LOOPBACK}:{port}"))
    try:
        return node_id in admin.list_topics(timeout=timeout).brokers
    except KafkaException:
        return False


def quiet_client(bootstrap: str) -> dict[str, Any]:
    """Admin client properties that log librdkafka's complaints nowhere."""
    return {"bootstrap.servers": bootstrap, "logger": _quiet}
