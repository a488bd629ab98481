"""The runtime folder's state file: which ports the servers use and which pids run them.

Written on every change (atomically: a temporary file, then a rename) so a `keyshared dev down`
in another shell, or after the starting process died, still knows what to stop. It records
ports even while a server is stopped, so a restart comes back on the same addresses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keyshared.dev.state_files import read_state_file, write_state_file

__all__ = [
    "KAFKA",
    "ZOOKEEPER",
    "ClusterState",
    "KafkaRecord",
    "ZooKeeperRecord",
    "load_state",
    "save_state",
]

# The two servers' names, as the state file, statuses and log messages spell them.
KAFKA = "kafka"
ZOOKEEPER = "zookeeper"

_FORMAT = 1


@dataclass
class KafkaRecord:
    """The broker's ports, and its pid while it runs."""

    port: int
    controller_port: int
    pid: int | None = None


@dataclass
class ZooKeeperRecord:
    """The ZooKeeper server's port, and its pid while it runs."""

    port: int
    pid: int | None = None


@dataclass
class ClusterState:
    """Everything `cluster.json` holds; a server is None until it was first started."""

    kafka: KafkaRecord | None = None
    zookeeper: ZooKeeperRecord | None = None
    format: int = field(default=_FORMAT)


def load_state(path: Path) -> ClusterState | None:
    """Read the state file; None when there is none.

    :raises ClusterStateError: the file exists but is not a state file of this version.
    """

    def build(data: dict[str, Any]) -> ClusterState:
        kafka = data.get("kafka")
        zookeeper = data.get("zookeeper")
        return ClusterState(
            kafka=KafkaRecord(**_checked(kafka, ("port", "controller_port"))) if kafka else None,
            zookeeper=ZooKeeperRecord(**_checked(zookeeper, ("port",))) if zookeeper else None,
        )

    return read_state_file(path, _FORMAT, build)


def save_state(path: Path, state: ClusterState) -> None:
    """Replace the state file atomically."""
    write_state_file(path, state)


def _checked(record: Any, required: tuple[str, ...]) -> dict[str, Any]:
    """Validate one server record: required int ports, an optional int pid, nothing else."""
    if not isinstance(record, dict):
        raise TypeError(f"a server record must be an object, not {record!r}")
    for key in required:
        if not isinstance(record.get(key), int):
            raise TypeError(f"{key!r} must be an integer port, not {record.get(key)!r}")
    pid = record.get("pid")
    if pid is not None and not isinstance(pid, int):
        raise TypeError(f"'pid' must be an integer or null, not {pid!r}")
    return {key: value for key, value in record.items() if key in (*required, "pid")}
