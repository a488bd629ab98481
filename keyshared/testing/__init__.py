"""A real Kafka broker and ZooKeeper server for the tests of your own handlers.

`kafka_cluster()` is a context manager; `keyshared.testing.plugin` offers the same as pytest
fixtures. Where the servers come from (``backend``, default ``$KEYSHARED_TEST_BACKEND``, else
``auto``):

- ``external``: ``$KEYSHARED_BOOTSTRAP_SERVERS`` and ``$KEYSHARED_ZOOKEEPER`` (for example after
  ``eval "$(keyshared dev up)"``); never stopped here.
- ``containers``: two testcontainers from the locally built image (`keyshared dev image`),
  with host networking on free ports of 127.0.0.1.
- ``local``: a `LocalCluster` (java and the cached jars) in a temporary folder.
- ``auto``: ``external`` when both variables are set; else ``containers`` when a Docker engine
  answers and the image is on it; else ``local``. A missing image falls back with a warning
  instead of building one: a build runs debootstrap as root, which a test run should not do
  on its own.

Example::

    from keyshared.testing import kafka_cluster

    with kafka_cluster() as cluster:
        consumer = KeySharedConsumer({"bootstrap.servers": cluster.bootstrap_servers, ...}, ...)
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from keyshared.dev import BOOTSTRAP_ENV, ZOOKEEPER_ENV, LocalCluster

__all__ = [
    "BACKEND_ENV",
    "Backend",
    "KafkaCluster",
    "docker_client",
    "kafka_cluster",
]

log = logging.getLogger(__name__)

BACKEND_ENV = "KEYSHARED_TEST_BACKEND"
Backend = Literal["auto", "external", "containers", "local"]
_BACKENDS: tuple[Backend, ...] = ("auto", "external", "containers", "local")
_PING_TIMEOUT_S = 3


@dataclass(frozen=True)
class KafkaCluster:
    """A running Kafka broker and ZooKeeper server.

    :ivar bootstrap_servers: ``host:port`` for ``bootstrap.servers``.
    :ivar zookeeper_hosts: ``host:port`` for `coordinator.ZooKeeperCoordinator` (kazoo hosts).
    :ivar backend: where the servers came from: ``external``, ``containers`` or ``local``.
    :ivar local: the `LocalCluster` when ``backend == "local"`` (it can stop and restart a
        server); None otherwise.
    """

    bootstrap_servers: str
    zookeeper_hosts: str
    backend: Backend
    local: LocalCluster | None = None

    def env(self) -> dict[str, str]:
        """The variables that point `keyshared` commands (and ``external``) at this cluster."""
        return {BOOTSTRAP_ENV: self.bootstrap_servers, ZOOKEEPER_ENV: self.zookeeper_hosts}


def docker_client() -> Any | None:
    """A `docker.DockerClient` whose engine answers a ping within 3 s, or None.

    None also when the `testcontainers` extra is not installed: without it no container path
    exists, whatever the engine.
    """
    if importlib.util.find_spec("testcontainers") is None:
        return None
    import docker

    try:
        client = docker.from_env(timeout=_PING_TIMEOUT_S)
        client.ping()
    except Exception:  # any failure means "no usable engine"; the caller falls back
        return None
    return client


@contextlib.contextmanager
def kafka_cluster(
    backend: Backend | None = None, *, runtime_dir: Path | None = None
) -> Iterator[KafkaCluster]:
    """Start (or find) Kafka and ZooKeeper for the block; stop what was started on exit.

    :param backend: see the module docstring; default ``$KEYSHARED_TEST_BACKEND`` or ``auto``.
    :param runtime_dir: the ``local`` backend's folder; default a temporary one, removed after.
    :raises ValueError: an unknown backend, or ``external`` without both variables.
    :raises keyshared.dev.DevClusterError: the servers did not start (the message says why).
    """
    chosen = _resolve(backend if backend is not None else _backend_from_env())
    if chosen == "external":
        yield KafkaCluster(os.environ[BOOTSTRAP_ENV], os.environ[ZOOKEEPER_ENV], "external")
    elif chosen == "containers":
        with _containers() as cluster:
            yield cluster
    else:
        with _local(runtime_dir) as cluster:
            yield cluster


def _backend_from_env() -> Backend:
    value = os.environ.get(BACKEND_ENV, "auto")
    if value not in _BACKENDS:
        raise ValueError(f"{BACKEND_ENV}={value!r}: expected one of {', '.join(_BACKENDS)}")
    return value


def _resolve(backend: Backend) -> Backend:
    """Turn ``auto`` into a concrete backend; check that ``external`` has its variables."""
    if backend not in _BACKENDS:
        raise ValueError(f"backend {backend!r}: expected one of {', '.join(_BACKENDS)}")
    has_external = bool(os.environ.get(BOOTSTRAP_ENV) and os.environ.get(ZOOKEEPER_ENV))
    if backend == "external" and not has_external:
        raise ValueError(f"backend 'external' needs both {BOOTSTRAP_ENV} and {ZOOKEEPER_ENV}")
    if backend != "auto":
        return backend
    if has_external:
        return "external"
    client = docker_client()
    if client is None:
        return "local"
    from keyshared.dev.image import image_tag

    tag = image_tag()
    try:
        client.images.get(tag)
    except Exception:
        log.warning(
            "a Docker engine answers but image %s is not on it: using a LocalCluster "
            "(build the image with `keyshared dev image`)",
            tag,
        )
        return "local"
    finally:
        client.close()
    return "containers"


@contextlib.contextmanager
def _containers() -> Iterator[KafkaCluster]:
    from keyshared.dev.image import ensure_image
    from keyshared.testing.containers import container_servers

    client = docker_client()
    if client is None:
        raise RuntimeError(
            "backend 'containers' needs the testcontainers extra (pip install "
            "'keyshared[docker]') and a Docker engine that answers (DOCKER_HOST)"
        )
    try:
        image = ensure_image(client).tag
        with container_servers(client, image) as servers:
            yield KafkaCluster(servers.bootstrap_servers, servers.zookeeper_hosts, "containers")
    finally:
        client.close()


@contextlib.contextmanager
def _local(runtime_dir: Path | None) -> Iterator[KafkaCluster]:
    with contextlib.ExitStack() as stack:
        if runtime_dir is None:
            runtime_dir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="keyshared-"))
            )
        cluster = LocalCluster(runtime_dir)
        stack.callback(cluster.down)
        status = cluster.up()
        assert status.kafka.address and status.zookeeper.address
        yield KafkaCluster(status.kafka.address, status.zookeeper.address, "local", cluster)
