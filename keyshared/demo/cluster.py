"""Find the Kafka to run against: the one given, else the local dev cluster, started if needed.

Why start it rather than fail: ``keyshared demo`` is the first command a new user runs, and the
local cluster (real Kafka + ZooKeeper, jars fetched once) is what ``keyshared dev up`` would
start anyway. It is left running afterwards (``keyshared dev down`` stops it) so the metrics,
``keyshared status`` and a second run need no new start; ``stop_cluster`` stops it instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.console import Console

from keyshared.dev import DevClusterError, LocalCluster, pinned_versions

__all__ = ["ClusterChoice", "choose_cluster"]


@dataclass
class ClusterChoice:
    """Where to connect, and the local cluster if this process found or started one."""

    bootstrap: str
    zookeeper: str | None
    cluster: LocalCluster | None = None
    started: bool = False

    def release(self, stop: bool, console: Console) -> None:
        """Stop the local cluster if this process started it and ``stop``; else say how to."""
        if self.cluster is None:
            return
        if not self.started:
            console.print("The local cluster was already running and is left as it was.")
        elif stop:
            self.cluster.down()
            console.print("Stopped the local cluster.")
        else:
            console.print("The local cluster keeps running: [bold]keyshared dev down[/] stops it.")


def choose_cluster(bootstrap: str | None, zookeeper: str | None, console: Console) -> ClusterChoice:
    """``bootstrap`` if given; else the local cluster in the default runtime folder (started)."""
    if bootstrap:
        return ClusterChoice(bootstrap, zookeeper)
    cluster = LocalCluster()
    versions = pinned_versions()
    began = time.monotonic()
    with console.status(
        f"No --bootstrap-servers given: starting the local Kafka {versions.kafka} and "
        f"ZooKeeper {versions.zookeeper} in {cluster.runtime_dir} ..."
    ):
        try:
            status = cluster.up()
        except DevClusterError as exc:
            raise RuntimeError(f"could not start the local cluster: {exc}") from exc
    assert status.kafka.address is not None
    started = status.kafka.started or status.zookeeper.started
    how = f"started in {time.monotonic() - began:.1f} s" if started else "already running"
    console.print(
        f"Local cluster ({how}): Kafka [bold]{status.kafka.address}[/], "
        f"ZooKeeper [bold]{status.zookeeper.address}[/]"
    )
    return ClusterChoice(status.kafka.address, status.zookeeper.address, cluster, started)
