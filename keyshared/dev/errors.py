"""Errors of the local development cluster, each named for what went wrong.

They all derive from `DevClusterError` so the CLI can print any of them as one clean line
instead of a traceback, and each message says what to do next.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "ClusterNotRunningError",
    "ClusterStateError",
    "DevClusterError",
    "ImageBuildError",
    "JarFetchError",
    "MissingToolError",
    "PortInUseError",
    "StartupError",
]


class DevClusterError(Exception):
    """Base class: something about the local Kafka + ZooKeeper went wrong."""


class MissingToolError(DevClusterError):
    """`java` or `mvn` is not installed (or too old); the message says what to install."""


class JarFetchError(DevClusterError):
    """Maven could not copy the pinned jars into the cache."""


class ImageBuildError(DevClusterError):
    """The container image of the servers could not be built (debootstrap or the engine failed)."""


class PortInUseError(DevClusterError):
    """A port the cluster must keep (to restart a server in place) is taken by someone else."""

    def __init__(self, server: str, port: int) -> None:
        super().__init__(
            f"{server} cannot restart on 127.0.0.1:{port}: the port is in use by another "
            "process. Free the port, or run `keyshared dev down` and `keyshared dev up` to "
            "start on new ports."
        )
        self.server = server
        self.port = port


class StartupError(DevClusterError):
    """A server did not become ready; `log_file` is where to look for the reason."""

    def __init__(self, message: str, log_file: Path) -> None:
        super().__init__(message)
        self.log_file = log_file


class ClusterStateError(DevClusterError):
    """The runtime folder's state file is unreadable or describes something impossible."""


class ClusterNotRunningError(DevClusterError):
    """An operation needs a running cluster and there is none in this runtime folder."""
