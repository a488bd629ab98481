"""`TopologyCluster`: several Kafka (KRaft) nodes and a ZooKeeper ensemble on 127.0.0.1.

Production runs replicated brokers and a ZooKeeper ensemble; this is that topology on one
machine, for `keyshared dev up --brokers 3 --zookeepers 3` and the topology tests. Each node is
its own `java` process with its own ports, config and data under the runtime folder:

    topology.json           nodes, ports and pids (see topology_state.py)
    kafka-1/ kafka-2/ ...   server.properties, data/ (each node's KRaft log dir)
    zookeeper-1/ ...        zoo.cfg, data/ (with its myid)
    logs/                   kafka-1.log, zookeeper-1.log, ... and *.out (JVM consoles)

**Kafka: combined nodes.** Every Kafka node is broker *and* controller (three JVMs, not six):
the quorum of three voters survives one node down, as the brokers' replicas do (RF 3,
`min.insync.replicas` 2), and killing a node kills a broker and a voter at once, the harder
case. Dedicated controllers would cost three more JVMs on a two-core machine and test nothing
keyshared talks to (clients never reach a controller).

**ZooKeeper: a `QuorumPeerMain` ensemble**, every member a participant; clients get all client
addresses (`127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3`) and kazoo moves between them.

Example::

    cluster = TopologyCluster("/tmp/ks-topo", brokers=3, zookeepers=3)
    cluster.up()                                  # every node answers, the quorums formed
    leader = cluster.partition_leader("orders", 0)
    cluster.stop_broker(leader, kill=True)        # a crash of one broker
    cluster.start_broker(leader)                  # same ports, same data
    cluster.down()
"""

from __future__ import annotations

import functools
import logging
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from keyshared.dev import kafka, process, zookeeper
from keyshared.dev.errors import ClusterNotRunningError, DevClusterError, PortInUseError
from keyshared.dev.jars import fetch_jars
from keyshared.dev.launch import DEFAULT_START_TIMEOUT_S
from keyshared.dev.parallel import combined_error, run_parallel
from keyshared.dev.ports import (
    await_port_released,
    free_ports,
    port_is_free,
)
from keyshared.dev.runtime import default_runtime_dir, folder_lock
from keyshared.dev.status import BOOTSTRAP_ENV, ZOOKEEPER_ENV
from keyshared.dev.tools import find_java
from keyshared.dev.topology_launch import NodeLauncher, quiet_client
from keyshared.dev.topology_state import (
    TOPOLOGY_FILE,
    BrokerNode,
    TopologyState,
    ZooKeeperNode,
    load_topology,
    save_topology,
)
from keyshared.dev.topology_status import TopologyStatus, probe_topology

__all__ = ["TopologyCluster", "TopologyStatus", "has_topology"]

log = logging.getLogger(__name__)

_STOP_TIMEOUT_S = 30.0  # a controlled shutdown moves leaderships first; past this, SIGKILL
_QUORUM_PROBE_S = 0.2


def has_topology(runtime_dir: Path) -> bool:
    """Whether ``runtime_dir`` holds a multi-node cluster (rather than a single-node one)."""
    return (runtime_dir / TOPOLOGY_FILE).is_file()


class TopologyCluster:
    """``brokers`` Kafka nodes (combined broker + controller) and a ZooKeeper ensemble of
    ``zookeepers`` members, on free loopback ports.

    :param runtime_dir: the folder for state, configs, data and logs.
    :param brokers: Kafka nodes; topics get replication factor ``min(brokers, 3)`` and
        ``min.insync.replicas`` one less (RF 3 / min ISR 2 for three).
    :param zookeepers: ZooKeeper ensemble members.
    :param start_timeout: seconds each node gets to answer after its JVM starts.
    :param stop_timeout: seconds a node gets after SIGTERM before SIGKILL.
    :param kafka_heap_mb: each broker's `-Xmx` (smaller than the single node's: three share
        the machine).
    :param zookeeper_heap_mb: each ZooKeeper member's `-Xmx`.
    :param kafka_overrides: extra server.properties entries for every broker, applied last.
    """

    def __init__(
        self,
        runtime_dir: Path | str | None = None,
        *,
        brokers: int = 3,
        zookeepers: int = 3,
        jar_cache: Path | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT_S,
        stop_timeout: float = _STOP_TIMEOUT_S,
        kafka_heap_mb: int = 512,
        zookeeper_heap_mb: int = 192,
        kafka_overrides: Mapping[str, str] | None = None,
    ) -> None:
        if brokers < 1 or zookeepers < 1:
            raise ValueError("a topology needs at least one broker and one ZooKeeper member")
        root = Path(runtime_dir).expanduser() if runtime_dir else default_runtime_dir()
        self.runtime_dir = root.absolute()
        self.state_file = self.runtime_dir / TOPOLOGY_FILE
        self.brokers, self.zookeepers = brokers, zookeepers
        self.replicas = min(brokers, 3)
        self._jar_cache = jar_cache
        self._stop_timeout = stop_timeout
        self._state_lock = threading.Lock()
        self._launcher = NodeLauncher(
            self.runtime_dir,
            save=self._save,
            jar_cache=jar_cache,
            start_timeout=start_timeout,
            kafka_heap_mb=kafka_heap_mb,
            zookeeper_heap_mb=zookeeper_heap_mb,
            kafka_overrides=kafka_overrides or {},
            replicas=self.replicas,
        )

    def __repr__(self) -> str:
        return (
            f"TopologyCluster({str(self.runtime_dir)!r}, brokers={self.brokers}, "
            f"zookeepers={self.zookeepers})"
        )

    @classmethod
    def existing(cls, runtime_dir: Path | str, **options: object) -> TopologyCluster:
        """The topology recorded in ``runtime_dir`` (its sizes from `topology.json`).

        :raises ClusterNotRunningError: the folder holds no topology.
        """
        path = Path(runtime_dir).expanduser().absolute()
        state = load_topology(path / TOPOLOGY_FILE)
        if state is None:
            raise ClusterNotRunningError(f"no multi-node cluster was started in {path}")
        return cls(path, brokers=len(state.brokers), zookeepers=len(state.zookeepers), **options)  # type: ignore[arg-type]

    # -- the whole cluster ------------------------------------------------------------------

    def up(self) -> TopologyStatus:
        """Start every node that is not running, in parallel; return once each broker answers
        a metadata request listing every broker and each ZooKeeper member serves (as leader
        or follower). On failure every node this call started is stopped again.

        :raises DevClusterError: the folder holds a topology of other sizes, or a node failed.
        """
        with folder_lock(self.runtime_dir):
            state = self._load_or_plan()
            down = [n.name for n in state.nodes if not self._launcher.running(n)]
            if down:
                find_java()
                fetch_jars(self._jar_cache)
            abort, started = threading.Event(), list[str]()
            tasks: dict[str, Callable[[], None]] = {}
            for broker in state.brokers:
                tasks[broker.name] = functools.partial(
                    self._launcher.start_broker, state, broker, abort, started
                )
            for member in state.zookeepers:
                tasks[member.name] = functools.partial(
                    self._launcher.start_zookeeper, state, member, abort, started
                )
            try:
                errors = run_parallel(tasks, abort)
            except BaseException:
                self._stop_names(state, started)
                raise
            if errors:
                self._stop_names(state, started)
                raise combined_error(errors)
            return probe_topology(
                self.runtime_dir, state, self._launcher, started, probe_timeout=None
            )

    def down(self) -> dict[str, int]:
        """Stop every node (SIGTERM, SIGKILL after ``stop_timeout``); node name -> pid stopped.

        Brokers stop before ZooKeeper, all brokers at once. Idempotent.
        """
        with folder_lock(self.runtime_dir):
            state = load_topology(self.state_file)
            stopped: dict[str, int] = {}
            if state is None:
                return stopped
            for nodes in (state.brokers, state.zookeepers):
                tasks: dict[str, Callable[[], None]] = {
                    node.name: functools.partial(self._stop_into, state, node, stopped)
                    for node in nodes
                }
                errors = run_parallel(tasks, threading.Event())
                if errors:
                    raise combined_error(errors)
            for node in state.nodes:
                for pid in process.find_processes(self._launcher.files(node).marker):
                    log.warning("stopping stray %s pid %d", node.name, pid)
                    process.stop(pid, self._launcher.files(node).marker, self._stop_timeout)
                    stopped.setdefault(node.name, pid)
            return stopped

    def purge(self) -> None:
        """Delete every node's data and logs and the state file (the next `up` is cold).

        :raises DevClusterError: a node is still running.
        """
        with folder_lock(self.runtime_dir):
            state = load_topology(self.state_file)
            if state is None:
                return
            if any(self._launcher.running(n) for n in state.nodes):
                raise DevClusterError(f"the cluster in {self.runtime_dir} is running; stop it")
            for node in state.nodes:
                shutil.rmtree(self._launcher.files(node).home, ignore_errors=True)
            shutil.rmtree(self.runtime_dir / "logs", ignore_errors=True)
            self.state_file.unlink(missing_ok=True)

    def status(self, probe_timeout: float = 2.0) -> TopologyStatus:
        """Each node's address, pid, whether it answers now, and the ZooKeeper roles."""
        state = self._loaded()
        return probe_topology(
            self.runtime_dir, state, self._launcher, [], probe_timeout=probe_timeout
        )

    def env(self) -> dict[str, str]:
        """`KEYSHARED_BOOTSTRAP_SERVERS` and `KEYSHARED_ZOOKEEPER` with every running node."""
        return probe_topology(
            self.runtime_dir, self._loaded(), self._launcher, [], probe_timeout=None
        ).env()

    @property
    def bootstrap_servers(self) -> str:
        return self.env()[BOOTSTRAP_ENV]

    @property
    def zookeeper_hosts(self) -> str:
        return self.env()[ZOOKEEPER_ENV]

    # -- one node at a time (for crash tests) -------------------------------------------------

    def stop_broker(self, node_id: int, *, kill: bool = False) -> None:
        """Stop one Kafka node, keeping its ports and data; ``kill=True`` sends SIGKILL."""
        with folder_lock(self.runtime_dir):
            state = self._loaded()
            self._stop(state, state.broker(node_id), kill=kill)

    def start_broker(self, node_id: int) -> None:
        """Start one Kafka node again (same ports and data); return when it answers."""
        with folder_lock(self.runtime_dir):
            state = self._loaded()
            node = state.broker(node_id)
            for port in (node.port, node.controller_port):
                await_port_released(node.name, port)
            self._launcher.start_broker(state, node, threading.Event(), [])

    def stop_zookeeper_node(self, node_id: int, *, kill: bool = False) -> None:
        """Stop one ZooKeeper member, keeping its ports and data; ``kill=True``: SIGKILL."""
        with folder_lock(self.runtime_dir):
            state = self._loaded()
            self._stop(state, state.zookeeper(node_id), kill=kill)

    def start_zookeeper_node(self, node_id: int) -> None:
        """Start one ZooKeeper member again; return when it serves (it rejoined a quorum)."""
        with folder_lock(self.runtime_dir):
            state = self._loaded()
            node = state.zookeeper(node_id)
            for port in (node.port, node.quorum_port, node.election_port):
                await_port_released(node.name, port)
            self._launcher.start_zookeeper(state, node, threading.Event(), [])

    def broker_ids(self) -> list[int]:
        return [node.node_id for node in self._loaded().brokers]

    def zookeeper_roles(self, timeout: float = 1.0) -> dict[int, str]:
        """ZooKeeper member id -> `leader` / `follower`, for the members that serve now."""
        roles = {}
        for node in self._loaded().zookeepers:
            mode = zookeeper.server_mode(node.port, timeout)
            if mode is not None:
                roles[node.node_id] = mode
        return roles

    def partition_leader(self, topic: str, partition: int, timeout: float = 10.0) -> int:
        """The node id of the current leader of ``topic``'s ``partition``."""
        metadata = self._admin().list_topics(topic=topic, timeout=timeout)
        leader = int(metadata.topics[topic].partitions[partition].leader)
        if leader < 0:
            raise DevClusterError(f"{topic}[{partition}] has no leader now")
        return leader

    def await_in_sync(self, timeout: float = 60.0) -> None:
        """Until every partition of every topic has its full replica set in sync (after a
        broker restart: before the next broker may go, in a rolling restart).

        :raises TimeoutError: some partition stayed under-replicated for ``timeout`` s.
        """
        deadline = time.monotonic() + timeout
        admin = self._admin()
        lagging: list[str] = []
        while time.monotonic() < deadline:
            try:
                topics = admin.list_topics(timeout=5.0).topics
            except KafkaException:  # a broker that just came back: ask again
                time.sleep(_QUORUM_PROBE_S)
                continue
            lagging = [
                f"{name}[{pid}]"
                for name, meta in topics.items()
                for pid, part in meta.partitions.items()
                if len(part.isrs) < len(part.replicas) or part.leader < 0
            ]
            if not lagging:
                return
            time.sleep(_QUORUM_PROBE_S)
        raise TimeoutError(f"under-replicated after {timeout:.0f} s: {lagging[:5]}")

    # -- internals --------------------------------------------------------------------------

    def _admin(self) -> AdminClient:
        return AdminClient(quiet_client(self.bootstrap_servers))

    def _loaded(self) -> TopologyState:
        state = load_topology(self.state_file)
        if state is None:
            raise ClusterNotRunningError(f"no multi-node cluster was started in {self.runtime_dir}")
        return state

    def _load_or_plan(self) -> TopologyState:
        """The recorded topology (its sizes must match), or a new one on free ports."""
        state = load_topology(self.state_file)
        if state is None:
            ports = iter(free_ports(2 * self.brokers + 3 * self.zookeepers))
            state = TopologyState(
                cluster_id=kafka.new_cluster_id(),
                brokers=[
                    BrokerNode(i, next(ports), next(ports)) for i in range(1, self.brokers + 1)
                ],
                zookeepers=[
                    ZooKeeperNode(i, next(ports), next(ports), next(ports))
                    for i in range(1, self.zookeepers + 1)
                ],
            )
        elif (len(state.brokers), len(state.zookeepers)) != (self.brokers, self.zookeepers):
            raise DevClusterError(
                f"{self.runtime_dir} holds {len(state.brokers)} broker(s) and "
                f"{len(state.zookeepers)} ZooKeeper member(s); `keyshared dev down --purge` "
                "it first, or use another --runtime-dir"
            )
        for node in state.nodes:
            if not self._launcher.running(node):
                node.pid = None
                for port in _ports(node):
                    if not port_is_free(port):
                        raise PortInUseError(node.name, port)
        self._save(state)
        return state

    def _save(self, state: TopologyState) -> None:
        with self._state_lock:
            save_topology(self.state_file, state)

    def _stop(self, state: TopologyState, node: BrokerNode | ZooKeeperNode, *, kill: bool) -> int:
        """Stop ``node`` if it runs; record it stopped; return its pid (0: it was not running)."""
        pid = node.pid or 0
        stopped = pid and process.stop(
            pid, self._launcher.files(node).marker, self._stop_timeout, kill=kill
        )
        node.pid = None
        self._save(state)
        return pid if stopped else 0

    def _stop_into(
        self, state: TopologyState, node: BrokerNode | ZooKeeperNode, stopped: dict[str, int]
    ) -> None:
        if pid := self._stop(state, node, kill=False):
            stopped[node.name] = pid

    def _stop_names(self, state: TopologyState, names: list[str]) -> None:
        for node in state.nodes:
            if node.name in names:
                self._stop(state, node, kill=False)


def _ports(node: BrokerNode | ZooKeeperNode) -> tuple[int, ...]:
    if isinstance(node, BrokerNode):
        return (node.port, node.controller_port)
    return (node.port, node.quorum_port, node.election_port)
