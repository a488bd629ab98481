"""The local cluster launcher against real JVMs, in runtime folders of its own.

One cluster is started for the module (a cold start: storage formatted) and taken through
idempotent `up`, `env`, `status`, a broker restart, a port conflict and `down`. The error paths
that need no running server use throw-away folders.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from keyshared.dev import (
    BOOTSTRAP_ENV,
    ZOOKEEPER_ENV,
    ClusterNotRunningError,
    ClusterStateError,
    LocalCluster,
    MissingToolError,
    PortInUseError,
    StartupError,
    fetch_jars,
    process,
    tools,
)
from keyshared.dev import jars as jars_module
from keyshared.dev.ports import port_is_free
from keyshared.dev.topics import create_topic, unique_name

CLI = [sys.executable, "-c", "from keyshared.cli import main; main()"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster started (cold) once for this module and stopped at its end."""
    local = LocalCluster(tmp_path_factory.mktemp("dev-cluster"))
    try:
        local.up()
        yield local
    finally:
        local.down()


def _markers(cluster: LocalCluster) -> list[str]:
    return [str(cluster.runtime_dir / "kafka" / "server.properties"),
            str(cluster.runtime_dir / "zookeeper" / "zoo.cfg")]  # fmt: skip


def _ports(cluster: LocalCluster) -> list[int]:
    state = json.loads(cluster.state_file.read_text())
    return [state["kafka"]["port"], state["kafka"]["controller_port"], state["zookeeper"]["port"]]


@pytest.mark.integration
def test_up_starts_both_servers_on_free_loopback_ports(cluster: LocalCluster) -> None:
    status = cluster.status()
    assert status.ready
    assert status.kafka.pid and status.zookeeper.pid
    ports = _ports(cluster)
    assert len(set(ports)) == 3
    assert status.kafka.address == f"127.0.0.1:{ports[0]}"
    assert status.zookeeper.address == f"127.0.0.1:{ports[2]}"
    assert (cluster.runtime_dir / "kafka" / "data" / "meta.properties").is_file()
    assert status.kafka.log_file.stat().st_size > 0
    assert status.zookeeper.log_file.stat().st_size > 0


@pytest.mark.integration
def test_second_up_finds_the_running_cluster(cluster: LocalCluster) -> None:
    before = cluster.status()
    again = LocalCluster(cluster.runtime_dir).up()
    assert not again.kafka.started and not again.zookeeper.started
    assert (again.kafka.pid, again.zookeeper.pid) == (before.kafka.pid, before.zookeeper.pid)
    assert again.env() == before.env()


@pytest.mark.integration
def test_env_output_can_be_evaluated_by_a_shell(cluster: LocalCluster) -> None:
    command = shlex.join([*CLI, "dev", "env", "--runtime-dir", str(cluster.runtime_dir)])
    script = f'eval "$({command})" && printenv {BOOTSTRAP_ENV} {ZOOKEEPER_ENV}'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    env = cluster.env()
    assert result.stdout.splitlines() == [env[BOOTSTRAP_ENV], env[ZOOKEEPER_ENV]]


@pytest.mark.integration
def test_status_command_reports_both_answering(cluster: LocalCluster) -> None:
    result = subprocess.run(
        [*CLI, "dev", "status", "--runtime-dir", str(cluster.runtime_dir)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("answering") == 2


@pytest.mark.integration
def test_kafka_restarts_on_the_same_port_with_its_data(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = unique_name("restart")
    create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"before-restart")
    assert producer.flush(30) == 0

    kafka_pid = cluster.status().kafka.pid
    cluster.stop_kafka()
    stopped = cluster.status(probe_timeout=1.0)
    assert not stopped.kafka.running and stopped.zookeeper.answering
    assert kafka_pid is not None and not process.is_running(kafka_pid, _markers(cluster)[0])

    cluster.start_kafka()
    assert cluster.bootstrap_servers == bootstrap
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("g"),
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
    finally:
        consumer.close()
    assert message is not None and message.error() is None
    assert message.value() == b"before-restart"


@pytest.mark.integration
def test_restart_on_a_taken_port_fails_clearly(cluster: LocalCluster) -> None:
    port = _ports(cluster)[2]
    cluster.stop_zookeeper()
    with socket.socket() as squatter:
        # Like a server would: the probes' connections may still be in TIME_WAIT.
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(PortInUseError, match=f"127.0.0.1:{port}"):
            cluster.start_zookeeper()
    cluster.start_zookeeper()
    assert cluster.status().zookeeper.answering


@pytest.mark.integration
def test_down_stops_everything_and_frees_the_ports(cluster: LocalCluster) -> None:
    pids = {cluster.status().kafka.pid, cluster.status().zookeeper.pid}
    stopped = cluster.down()
    assert set(stopped) == {"kafka", "zookeeper"} and set(stopped.values()) == pids
    for marker in _markers(cluster):
        assert process.find_processes(marker) == []
    assert all(port_is_free(port) for port in _ports(cluster))
    assert cluster.down() == {}
    with pytest.raises(ClusterNotRunningError, match="keyshared dev up"):
        cluster.env()


@pytest.mark.integration
def test_failed_start_leaves_nothing_running(tmp_path: Path) -> None:
    """A broker that cannot start (a 1 MB heap) fails with its log; ZooKeeper is stopped too."""
    broken = LocalCluster(tmp_path, kafka_heap_mb=1)
    with pytest.raises(StartupError, match=r"Kafka \(pid \d+\) exited during startup") as failure:
        broken.up()
    assert failure.value.log_file == tmp_path / "logs" / "kafka.log"
    assert "heap" in str(failure.value).lower()
    for marker in _markers(broken):
        assert process.find_processes(marker) == []
    state = json.loads(broken.state_file.read_text())
    assert state["kafka"]["pid"] is None and state["zookeeper"]["pid"] is None


def test_corrupt_state_file_is_reported_and_cleared_by_down(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    cluster.state_file.write_text("{not json")
    with pytest.raises(ClusterStateError, match=re.escape(str(cluster.state_file))):
        cluster.up()
    assert cluster.down() == {}
    assert not cluster.state_file.exists()


def test_missing_java_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    tools.find_java.cache_clear()
    try:
        with pytest.raises(MissingToolError, match="openjdk-17-jre-headless"):
            LocalCluster(tmp_path / "runtime").up()
    finally:
        tools.find_java.cache_clear()


def test_missing_maven_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    tools.find_mvn.cache_clear()
    try:
        with pytest.raises(MissingToolError, match="apt-get install maven"):
            fetch_jars(tmp_path / "empty-cache")
    finally:
        tools.find_mvn.cache_clear()


@pytest.mark.integration
def test_cached_jars_need_no_maven(monkeypatch: pytest.MonkeyPatch) -> None:
    cached = fetch_jars()

    def no_maven() -> str:
        raise AssertionError("a cached fetch must not run mvn")

    monkeypatch.setattr(jars_module, "find_mvn", no_maven)
    assert fetch_jars() == cached
    assert any(name.startswith("kafka_2.13-") for name in os.listdir(cached))
