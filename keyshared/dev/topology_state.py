"""The state file of a multi-node local cluster (`topology.json`): its nodes, ports and pids.

A separate file from the single-node `cluster.json` (state.py): a runtime folder holds one or
the other, and `keyshared dev env/status/down` pick the cluster by which one exists. Written
atomically on every change, like `cluster.json`, and it keeps the ports of stopped nodes so a
restarted node comes back on its own address (the KRaft voter set and the ZooKeeper ensemble
list name every node's ports).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keyshared.dev.state_files import read_state_file, write_state_file
from keyshared.dev.zookeeper import EnsemblePeer

__all__ = [
    "TOPOLOGY_FILE",
    "BrokerNode",
    "TopologyState",
    "ZooKeeperNode",
    "load_topology",
    "save_topology",
]

TOPOLOGY_FILE = "topology.json"
_FORMAT = 1


@dataclass
class BrokerNode:
    """One Kafka node (broker and controller): its id, ports, and pid while it runs."""

    node_id: int
    port: int
    controller_port: int
    pid: int | None = None

    @property
    def name(self) -> str:
        return f"kafka-{self.node_id}"


@dataclass
class ZooKeeperNode:
    """One ZooKeeper ensemble member: its id (`myid`), ports, and pid while it runs."""

    node_id: int
    port: int
    quorum_port: int
    election_port: int
    pid: int | None = None

    @property
    def name(self) -> str:
        return f"zookeeper-{self.node_id}"

    @property
    def peer(self) -> EnsemblePeer:
        return EnsemblePeer(self.node_id, self.port, self.quorum_port, self.election_port)


@dataclass
class TopologyState:
    """Everything `topology.json` holds. ``cluster_id`` is shared by every Kafka node's
    formatted storage."""

    cluster_id: str
    brokers: list[BrokerNode]
    zookeepers: list[ZooKeeperNode]
    format: int = field(default=_FORMAT)

    @property
    def nodes(self) -> list[BrokerNode | ZooKeeperNode]:
        return [*self.brokers, *self.zookeepers]

    def broker(self, node_id: int) -> BrokerNode:
        for node in self.brokers:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no Kafka node {node_id}; nodes are {[b.node_id for b in self.brokers]}")

    def zookeeper(self, node_id: int) -> ZooKeeperNode:
        for node in self.zookeepers:
            if node.node_id == node_id:
                return node
        raise KeyError(
            f"no ZooKeeper node {node_id}; nodes are {[z.node_id for z in self.zookeepers]}"
        )


def load_topology(path: Path) -> TopologyState | None:
    """Read the state file; None when there is none.

    :raises ClusterStateError: the file exists but is not a topology file of this version.
    """

    def build(data: dict[str, Any]) -> TopologyState:
        return TopologyState(
            cluster_id=str(data["cluster_id"]),
            brokers=[BrokerNode(**node) for node in data["brokers"]],
            zookeepers=[ZooKeeperNode(**node) for node in data["zookeepers"]],
        )

    return read_state_file(path, _FORMAT, build)


def save_topology(path: Path, state: TopologyState) -> None:
    """Replace the state file atomically."""
    write_state_file(path, state)
