"""The faults of a chaos run on the production topology (three brokers, a ZooKeeper ensemble):
one node at a time, never the whole cluster.

- ``leader_kill``: SIGKILL the broker that leads the busiest partition (the partition of the
  last record a handler finished), keep it down past the controller's broker session so its
  leaderships move, start it again and wait until it is back in every ISR;
- ``rolling_restart``: every broker in turn stopped with SIGTERM (a controlled shutdown: it
  hands its leaderships over first) and started again, the next only once every partition is
  fully in sync again, as an operator upgrading a cluster does;
- ``zookeeper_follower_kill`` / ``zookeeper_leader_kill``: SIGKILL one ensemble member by its
  role (``srvr``), keep it down for a session timeout (a client that failed to move to another
  member would expire meanwhile), start it again and wait until it serves again.
"""

from __future__ import annotations

import time

from keyshared.dev.topology import TopologyCluster
from tests.chaos.observers import JournalTail
from tests.chaos.plan import ChaosPlan, Fault

__all__ = ["TOPOLOGY_FAULTS", "inject_topology_fault"]

TOPOLOGY_FAULTS = (
    "leader_kill",
    "rolling_restart",
    "zookeeper_follower_kill",
    "zookeeper_leader_kill",
)
_IN_SYNC_TIMEOUT_S = 90.0


def inject_topology_fault(
    fault: Fault, plan: ChaosPlan, cluster: TopologyCluster, topic: str, tail: JournalTail
) -> None:
    """Inject ``fault`` (one of :data:`TOPOLOGY_FAULTS`) and return when it is over."""
    if fault.kind == "leader_kill":
        tail.poll()
        partition = tail.last_partition
        node = cluster.partition_leader(topic, partition)
        fault.target = f"kafka-{node}, leader of [{partition}]"
        fault.t_fault = time.monotonic_ns()
        cluster.stop_broker(node, kill=True)
        time.sleep(plan.broker_down_seconds)  # the outage itself: past the broker session
        cluster.start_broker(node)
        fault.t_recovered = time.monotonic_ns()
        cluster.await_in_sync(_IN_SYNC_TIMEOUT_S)
    elif fault.kind == "rolling_restart":
        fault.t_fault = time.monotonic_ns()
        for node in cluster.broker_ids():
            cluster.stop_broker(node)
            cluster.start_broker(node)
            cluster.await_in_sync(_IN_SYNC_TIMEOUT_S)
        fault.t_recovered = time.monotonic_ns()
        fault.target = "kafka-" + ",".join(str(n) for n in cluster.broker_ids())
    elif fault.kind in ("zookeeper_follower_kill", "zookeeper_leader_kill"):
        role = fault.kind.split("_")[1]
        node = _member_with_role(cluster, role)
        fault.target = f"zookeeper-{node} ({role})"
        fault.t_fault = time.monotonic_ns()
        cluster.stop_zookeeper_node(node, kill=True)
        time.sleep(plan.session_timeout)  # the outage itself: a session that did not move expires
        cluster.start_zookeeper_node(node)
        fault.t_recovered = time.monotonic_ns()
    else:
        raise ValueError(fault.kind)


def _member_with_role(cluster: TopologyCluster, role: str, timeout: float = 30.0) -> int:
    """The ensemble member that is ``role`` now (after a restart the ensemble may still be
    settling: ask again until one is)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node, mode in sorted(cluster.zookeeper_roles().items()):
            if mode == role:
                return node
        time.sleep(0.2)
    raise AssertionError(f"no ZooKeeper member was {role} for {timeout:.0f} s")
