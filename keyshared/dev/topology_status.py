"""What a `TopologyCluster` looks like right now: every node, the ZooKeeper roles, and the
environment that points clients at all of them. Only read: never changes a node or the state.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from keyshared.dev import zookeeper
from keyshared.dev.errors import ClusterNotRunningError
from keyshared.dev.jars import pinned_versions
from keyshared.dev.ports import LOOPBACK
from keyshared.dev.status import BOOTSTRAP_ENV, ZOOKEEPER_ENV, ServerStatus
from keyshared.dev.topology_launch import NodeLauncher, lists_itself
from keyshared.dev.topology_state import BrokerNode, TopologyState, ZooKeeperNode

__all__ = ["TopologyStatus", "probe_topology"]


@dataclass(frozen=True)
class TopologyStatus:
    """Every node as seen now, and the environment that points clients at all of them."""

    runtime_dir: Path
    brokers: list[ServerStatus]
    zookeepers: list[ServerStatus]
    roles: dict[str, str]  # node name -> ZooKeeper `leader` / `follower` (serving members)

    @property
    def ready(self) -> bool:
        return all(node.answering for node in (*self.brokers, *self.zookeepers))

    def env(self) -> dict[str, str]:
        """Every running node's address, comma-separated, as clients take them."""
        brokers = [node.address for node in self.brokers if node.running and node.address]
        ensemble = [node.address for node in self.zookeepers if node.running and node.address]
        if not (brokers and ensemble):
            raise ClusterNotRunningError(
                f"no local cluster is running in {self.runtime_dir}; start it with "
                "`keyshared dev up --brokers N --zookeepers N`"
            )
        return {BOOTSTRAP_ENV: ",".join(brokers), ZOOKEEPER_ENV: ",".join(ensemble)}


def probe_topology(
    runtime_dir: Path,
    state: TopologyState,
    launcher: NodeLauncher,
    started: list[str],
    *,
    probe_timeout: float | None,
) -> TopologyStatus:
    """Every node of ``state``; ``probe_timeout=None`` trusts that running means answering
    (the caller has just waited for that).

    :param started: names of the nodes the calling operation started.
    """
    versions = pinned_versions()
    roles: dict[str, str] = {}

    def one(node: BrokerNode | ZooKeeperNode) -> ServerStatus:
        running = launcher.running(node)
        if isinstance(node, BrokerNode):
            answering = running and (
                probe_timeout is None or lists_itself(node.port, node.node_id, probe_timeout)
            )
            version = versions.kafka
        else:
            mode = zookeeper.server_mode(node.port) if running and probe_timeout else None
            if mode:
                roles[node.name] = mode
            answering = running and (probe_timeout is None or mode is not None)
            version = versions.zookeeper
        return ServerStatus(
            name=node.name,
            version=version,
            address=f"{LOOPBACK}:{node.port}",
            pid=node.pid if running else None,
            answering=answering,
            started=node.name in started,
            log_file=launcher.files(node).log_file,
        )

    return TopologyStatus(
        runtime_dir=runtime_dir,
        brokers=[one(node) for node in state.brokers],
        zookeepers=[one(node) for node in state.zookeepers],
        roles=roles,
    )
