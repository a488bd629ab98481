"""The local development cluster: a real Kafka (KRaft) broker and ZooKeeper server on loopback.

`keyshared dev up|down|env|status|fetch` and the test fixtures are built on `LocalCluster`. The
jars come from Maven Central (`pom.xml` pins them) and are cached outside the repository.
"""

from __future__ import annotations

from keyshared.dev.cluster import (
    BOOTSTRAP_ENV,
    RUNTIME_DIR_ENV,
    ZOOKEEPER_ENV,
    ClusterStatus,
    LocalCluster,
    ServerStatus,
    default_runtime_dir,
)
from keyshared.dev.errors import (
    ClusterNotRunningError,
    ClusterStateError,
    DevClusterError,
    JarFetchError,
    MissingToolError,
    PortInUseError,
    StartupError,
)
from keyshared.dev.jars import fetch_jars, pinned_versions

__all__ = [
    "BOOTSTRAP_ENV",
    "RUNTIME_DIR_ENV",
    "ZOOKEEPER_ENV",
    "ClusterNotRunningError",
    "ClusterStateError",
    "ClusterStatus",
    "DevClusterError",
    "JarFetchError",
    "LocalCluster",
    "MissingToolError",
    "PortInUseError",
    "ServerStatus",
    "StartupError",
    "default_runtime_dir",
    "fetch_jars",
    "pinned_versions",
]
