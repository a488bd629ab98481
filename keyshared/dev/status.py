"""What a local cluster looks like right now, and the environment that points clients at it.

`LocalCluster.up()`, `status()` and `env()` all answer with a `ClusterStatus`; `keyshared dev
status` prints one and `keyshared dev env` prints its `env()`. Building it is kept apart from
starting and stopping servers so that a status is only ever *read*: it never changes the state
file or a process.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keyshared.dev import kafka, zookeeper
from keyshared.dev.errors import ClusterNotRunningError
from keyshared.dev.jars import pinned_versions
from keyshared.dev.ports import LOOPBACK
from keyshared.dev.state import KAFKA, ZOOKEEPER, ClusterState

__all__ = ["BOOTSTRAP_ENV", "ZOOKEEPER_ENV", "ClusterStatus", "ServerStatus", "probe_status"]

BOOTSTRAP_ENV = "KEYSHARED_BOOTSTRAP_SERVERS"
ZOOKEEPER_ENV = "KEYSHARED_ZOOKEEPER"


@dataclass(frozen=True)
class ServerStatus:
    """One server as seen now.

    :ivar address: `127.0.0.1:port`, or None if the server was never started in this folder.
    :ivar pid: the server's pid while it runs, else None.
    :ivar answering: it answered its protocol probe (metadata for Kafka, `ruok` for ZooKeeper).
    :ivar started: the call that returned this status started it (False: it was running).
    """

    name: str
    version: str
    address: str | None
    pid: int | None
    answering: bool
    started: bool
    log_file: Path

    @property
    def running(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True)
class ClusterStatus:
    """Both servers, and the environment that points clients at them."""

    runtime_dir: Path
    kafka: ServerStatus
    zookeeper: ServerStatus

    @property
    def ready(self) -> bool:
        return self.kafka.answering and self.zookeeper.answering

    def env(self) -> dict[str, str]:
        """`KEYSHARED_BOOTSTRAP_SERVERS` and `KEYSHARED_ZOOKEEPER` for the running servers."""
        if not (self.kafka.running and self.zookeeper.running):
            raise ClusterNotRunningError(
                f"no local cluster is running in {self.runtime_dir}; start it with "
                "`keyshared dev up`"
            )
        assert self.kafka.address is not None and self.zookeeper.address is not None
        return {BOOTSTRAP_ENV: self.kafka.address, ZOOKEEPER_ENV: self.zookeeper.address}


def probe_status(
    runtime_dir: Path,
    state: ClusterState,
    *,
    kafka_pid: int | None,
    zookeeper_pid: int | None,
    kafka_log: Path,
    zookeeper_log: Path,
    started: Collection[str],
    probe_timeout: float | None,
    kafka_client_config: Mapping[str, Any] | None = None,
) -> ClusterStatus:
    """The status of the servers `state` records, given which of them run (`*_pid`).

    :param started: names of the servers the calling operation started.
    :param probe_timeout: seconds each running server gets to answer its protocol probe;
        None trusts the caller that running means answering (it has just waited for that).
    :param kafka_client_config: extra properties of the broker probe (SASL credentials).
    """
    versions = pinned_versions()
    kafka_address = f"{LOOPBACK}:{state.kafka.port}" if state.kafka else None
    zk_address = f"{LOOPBACK}:{state.zookeeper.port}" if state.zookeeper else None
    if probe_timeout is None:
        kafka_answers, zk_answers = kafka_pid is not None, zookeeper_pid is not None
    else:
        kafka_answers = bool(
            kafka_pid
            and state.kafka
            and kafka.answers_metadata(
                kafka_address or "", state.kafka.port, probe_timeout, kafka_client_config
            )
        )
        zk_answers = bool(
            zookeeper_pid
            and state.zookeeper
            and zookeeper.answers_ruok(state.zookeeper.port, probe_timeout)
        )
    return ClusterStatus(
        runtime_dir=runtime_dir,
        kafka=ServerStatus(
            name=KAFKA,
            version=versions.kafka,
            address=kafka_address,
            pid=kafka_pid,
            answering=kafka_answers,
            started=KAFKA in started,
            log_file=kafka_log,
        ),
        zookeeper=ServerStatus(
            name=ZOOKEEPER,
            version=versions.zookeeper,
            address=zk_address,
            pid=zookeeper_pid,
            answering=zk_answers,
            started=ZOOKEEPER in started,
            log_file=zookeeper_log,
        ),
    )
