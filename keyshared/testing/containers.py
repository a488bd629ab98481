"""Kafka (KRaft) and ZooKeeper in two testcontainers, configured exactly like `LocalCluster`.

Both containers run the locally built image (`keyshared.dev.image`) with host networking, on
free ports of 127.0.0.1: no port mapping and no bridge network, so an engine started with
``--bridge=none`` serves them and the servers advertise the same addresses a `LocalCluster`
would. Each server's config is written on this side by the same code as `LocalCluster`'s
(`keyshared.dev.kafka.write_config`, `keyshared.dev.zookeeper.write_config`) into a folder
that is copied into the container at the same path, so every path in the configs is valid in
there; the data stays in the container and goes with it.

Example::

    client = docker.from_env()
    with container_servers(client, ensure_image(client).tag) as servers:
        print(servers.bootstrap_servers, servers.zookeeper_hosts)
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keyshared.dev import kafka, zookeeper
from keyshared.dev.errors import StartupError
from keyshared.dev.files import ServerFiles
from keyshared.dev.image import JARS_IN_IMAGE
from keyshared.dev.launch import DEFAULT_START_TIMEOUT_S
from keyshared.dev.ports import LOOPBACK, free_ports

__all__ = ["CONTAINER_LABEL", "ContainerServers", "container_servers"]

log = logging.getLogger(__name__)

# Every container started here carries it: `docker rm -f $(docker ps -aq --filter label=...)`
# cleans up after a run that was killed before its clean-up ran.
CONTAINER_LABEL = "org.keyshared.test"
_KAFKA_HEAP_MB = 768  # as LocalCluster
_ZOOKEEPER_HEAP_MB = 256
_PROBE_INTERVAL_S = 0.2
_LOG_TAIL_LINES = 15


@dataclass(frozen=True)
class ContainerServers:
    """The addresses of the two running containers, and the containers themselves."""

    bootstrap_servers: str
    zookeeper_hosts: str
    kafka: Any  # testcontainers.core.container.DockerContainer
    zookeeper: Any


@contextlib.contextmanager
def container_servers(
    client: Any, image: str, *, start_timeout: float = DEFAULT_START_TIMEOUT_S
) -> Iterator[ContainerServers]:
    """Start both containers, wait until each answers its protocol, remove both on exit.

    :param client: a `docker.DockerClient` (its engine runs the containers).
    :param image: a tag built by `keyshared.dev.image.ensure_image`.
    :param start_timeout: seconds each server gets to answer.
    :raises StartupError: a server exited or did not answer (the message quotes its log).
    """
    from testcontainers.core.container import DockerContainer

    _no_reaper_without_its_image(client)
    kafka_port, controller_port, zk_port = free_ports(3)
    with (
        tempfile.TemporaryDirectory(prefix="keyshared-containers-") as work,
        contextlib.ExitStack() as stack,
    ):
        root = Path(work)
        kafka_files = kafka.kafka_files(root)
        zk_files = zookeeper.zookeeper_files(root)
        kafka.write_config(kafka_files, kafka_port, controller_port)
        zookeeper.write_config(zk_files, zk_port)
        jars = Path(str(JARS_IN_IMAGE))
        kafka_script = " && ".join(
            [
                shlex.join(kafka.format_command("java", jars, kafka_files)),
                "exec "
                + shlex.join(kafka.server_command("java", jars, kafka_files, _KAFKA_HEAP_MB)),
            ]
        )
        zk_script = "exec " + shlex.join(
            zookeeper.server_command("java", jars, zk_files, _ZOOKEEPER_HEAP_MB)
        )
        (root / "logs").mkdir()
        containers = []
        for name, script in (("zookeeper", zk_script), ("kafka", kafka_script)):
            container = (
                DockerContainer(image)
                .with_command(["sh", "-c", script])
                .with_copy_into_container(root, f"{root.parent}/")
                .with_kwargs(network_mode="host", labels={CONTAINER_LABEL: name})
            )
            stack.enter_context(container)
            containers.append(container)
            log.info("started %s container %s", name, container.get_container_id()[:12])
        zk_container, kafka_container = containers
        bootstrap = f"{LOOPBACK}:{kafka_port}"
        _await(
            "ZooKeeper",
            zk_container,
            zk_files,
            lambda: zookeeper.answers_ruok(zk_port),
            start_timeout,
        )
        _await(
            "Kafka",
            kafka_container,
            kafka_files,
            lambda: kafka.answers_metadata(bootstrap, kafka_port, timeout=2.0),
            start_timeout,
        )
        yield ContainerServers(bootstrap, f"{LOOPBACK}:{zk_port}", kafka_container, zk_container)


def _no_reaper_without_its_image(client: Any) -> None:
    """Turn off testcontainers' reaper (Ryuk) when its image is not on the engine.

    Ryuk removes containers of a killed test process, but it is an image from Docker Hub: an
    air-gapped engine cannot pull it and every start would fail. Without it the containers are
    still removed on every normal exit (and they carry `CONTAINER_LABEL` for a manual clean-up).
    An explicit `TESTCONTAINERS_RYUK_DISABLED` from the user wins.
    """
    import os

    import docker.errors
    from testcontainers.core.config import testcontainers_config

    if "TESTCONTAINERS_RYUK_DISABLED" in os.environ or testcontainers_config.ryuk_disabled:
        return
    try:
        client.images.get(testcontainers_config.ryuk_image)
    except docker.errors.ImageNotFound:
        log.info(
            "%s is not on the engine: testcontainers' reaper is off",
            testcontainers_config.ryuk_image,
        )
        testcontainers_config.ryuk_disabled = True


def _await(
    name: str, container: Any, files: ServerFiles, probe: Callable[[], bool], timeout: float
) -> None:
    """Poll `probe` until it succeeds; fail fast if the container exits, quoting its log."""
    deadline = time.monotonic() + timeout
    while not probe():
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        if wrapped.status not in ("created", "running"):
            raise StartupError(
                f"{name} container exited during startup ({wrapped.status})"
                f"{_tail(container, files)}",
                files.log_file,
            )
        if time.monotonic() > deadline:
            raise StartupError(
                f"{name} container did not answer within {timeout:.0f} s{_tail(container, files)}",
                files.log_file,
            )
        time.sleep(_PROBE_INTERVAL_S)


def _tail(container: Any, files: ServerFiles) -> str:
    """The last lines of the server's log in the container, else of its console output.

    A container that has exited cannot run `tail`; its console (`docker logs`) still has what
    the JVM printed before the log existed (a bad flag, a missing class).
    """
    source, text = f"{files.log_file} (in the container)", ""
    with contextlib.suppress(Exception):
        result = container.get_wrapped_container().exec_run(
            ["tail", "-n", str(_LOG_TAIL_LINES), str(files.log_file)]
        )
        if result.exit_code == 0:
            text = result.output.decode(errors="replace")
    if not text.strip():
        source = "the container's console"
        with contextlib.suppress(Exception):
            stdout, stderr = container.get_logs()
            text = (stdout + stderr).decode(errors="replace")
    lines = text.strip().splitlines()[-_LOG_TAIL_LINES:]
    if not lines:
        return ""
    shown = "\n".join(f"    {line}" for line in lines)
    return f"\n  last lines of {source}:\n{shown}"
