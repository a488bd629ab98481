"""The testcontainers path of `keyshared.testing`: both servers in containers of the local image.

Needs a Docker engine (``DOCKER_HOST``) on this machine: `tests/run.sh` starts a private one
(`tests/docker_engine.sh`), builds the image, and sets ``KEYSHARED_REQUIRE_DOCKER=1`` so that a
missing engine fails these tests instead of skipping them. Elsewhere they skip.

The guarantee test is the process-level one of `key_shared` mode (issue 11) on a smaller
scale: two ``keyshared run`` members, the second joining while records flow (a range moves
with its mandatory drain), against the containers' Kafka and ZooKeeper.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from coordinator import ZooKeeperCoordinator
from keyshared.dev import BOOTSTRAP_ENV, ZOOKEEPER_ENV
from keyshared.dev.errors import StartupError
from keyshared.dev.image import base_tag, debian_release, image_tag
from keyshared.dev.topics import create_topic, delete_topics, unique_name
from keyshared.testing import BACKEND_ENV, KafkaCluster, docker_client, kafka_cluster
from keyshared.testing.containers import CONTAINER_LABEL, container_servers
from tests.kafka.support.journal import (
    check,
    count_finished,
    kill_all,
    produce,
    read_journal,
    sequenced,
    start_consumer,
    terminate,
    wait_for,
)
from tests.testing.user_suite import run_user_suite

pytestmark = pytest.mark.integration

REQUIRE_ENV = "KEYSHARED_REQUIRE_DOCKER"
KEYS = 300
PER_KEY = 20


@pytest.fixture(scope="module")
def containers() -> Iterator[KafkaCluster]:
    """Kafka + ZooKeeper containers for this module; skip (or fail, in CI) without an engine."""
    client = docker_client()
    if client is None:
        reason = "no Docker engine answers (DOCKER_HOST); see tests/docker_engine.sh"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
        pytest.skip(reason)
    client.close()
    started = time.monotonic()
    with kafka_cluster("containers") as cluster:
        print(f"containers answered in {time.monotonic() - started:.1f} s")
        yield cluster


def test_both_servers_run_in_host_network_containers_of_the_local_image(
    containers: KafkaCluster,
) -> None:
    client = docker_client()
    assert client is not None
    try:
        running = client.containers.list(filters={"label": CONTAINER_LABEL})
        roles = {c.labels[CONTAINER_LABEL]: c for c in running}
        assert set(roles) == {"kafka", "zookeeper"}
        for container in roles.values():
            assert container.attrs["HostConfig"]["NetworkMode"] == "host"
            assert image_tag() in container.image.tags
        # No network but the engine's built-ins: the default bridge was never created.
        assert "bridge" not in {n.name for n in client.networks.list()}
    finally:
        client.close()
    assert containers.backend == "containers" and containers.local is None
    assert containers.bootstrap_servers.startswith("127.0.0.1:")
    metadata = AdminClient({"bootstrap.servers": containers.bootstrap_servers}).list_topics(
        timeout=10
    )
    assert [b.host for b in metadata.brokers.values()] == ["127.0.0.1"]
    zk = KazooClient(hosts=containers.zookeeper_hosts)
    zk.start(timeout=10)
    try:
        path = zk.create(f"/{unique_name('probe')}", b"in a container")
        assert zk.get(path)[0] == b"in a container"
    finally:
        zk.stop()
        zk.close()


@pytest.mark.slow
def test_order_and_completeness_in_key_shared_mode_against_the_containers(
    containers: KafkaCluster, tmp_path: Path
) -> None:
    bootstrap, zookeeper = containers.bootstrap_servers, containers.zookeeper_hosts
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic, group = unique_name("containers"), unique_name("containers")
    create_topic(admin, topic, partitions=2)
    keys: list[bytes | None] = [f"key-{i:04d}".encode() for i in range(KEYS)]
    journal = tmp_path / "journal"
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str) -> None:
        args = ["--mode", "key_shared", "--zookeeper", zookeeper, "--session-timeout", "10",
                "--commit-interval", "0.2", "-X", f"client.id={name}"]  # fmt: skip
        procs[name] = start_consumer(
            bootstrap, group, topic, journal, workers=4, sleep_ms="1,4", args=args,
            log=tmp_path / f"{name}.log",
        )  # fmt: skip

    try:
        with ZooKeeperCoordinator(zookeeper) as zk:
            start("A")
            wait_for(lambda: {r.owner for r in zk.status(group).ranges} == {"A"}, 60, "A owns all")
            records = sequenced(keys, PER_KEY)
            half = len(records) // 2
            produce(bootstrap, topic, records[:half])
            wait_for(lambda: count_finished(journal) >= half // 4, 60, "A to progress")
            start("B")  # a range moves from A to B while A still has records of it
            wait_for(
                lambda: {r.owner for r in zk.status(group).ranges} == {"A", "B"}, 60, "B to join"
            )
            produce(bootstrap, topic, records[half:])
        wait_for(lambda: count_finished(journal) >= KEYS * PER_KEY, 120, "every record")
        for name in list(procs):
            code = terminate(procs.pop(name))
            assert code == 0, (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:]
    finally:
        kill_all(procs.values())
        delete_topics(admin, [topic])
    events = read_journal(journal)
    report = check(events, dict.fromkeys(keys, PER_KEY))
    assert not report.missing and not report.violations, report.summary()
    assert report.duplicates == 0, f"duplicates without a crash: {report.duplicate_ids[:5]}"
    assert len({e.pid for e in events}) == 2, "both members processed records"


def test_auto_chooses_the_containers_for_a_users_handler_test(
    containers: KafkaCluster, tmp_path: Path
) -> None:
    """With an engine and the image, ``auto`` starts containers of its own for the user's suite."""
    env = {BACKEND_ENV: "auto", BOOTSTRAP_ENV: "", ZOOKEEPER_ENV: ""}
    result = run_user_suite(tmp_path, "containers", env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout


def test_a_server_that_exits_fails_the_start_with_its_output(containers: KafkaCluster) -> None:
    """The base image has a JRE but no jars: the start fails fast, quoting the JVM's error."""
    client = docker_client()
    assert client is not None
    try:
        with (
            pytest.raises(StartupError, match="exited during startup") as failure,
            container_servers(client, base_tag(debian_release()), start_timeout=30),
        ):
            pass
        left = client.containers.list(all=True, filters={"label": CONTAINER_LABEL})
    finally:
        client.close()
    assert "Could not find or load main class" in str(failure.value)
    assert len(left) == 2, "only this module's own two containers remain"
