"""Fixtures for the coordinator's tests: separate kazoo clients (one per simulated member), a
fresh group per test, ``key_shared`` members (``start``), a coordinator for status reads
(``admin``, and ``zk`` under the default namespace), and a real session expiry.

Every test runs against the session's real ZooKeeper (``zookeeper_hosts``). Members are separate
``KazooClient`` sessions, so ephemeral znodes, watches and expiry behave as across processes.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError

from coordinator import ZooKeeperCoordinator
from coordinator.layout import GroupLayout
from keyshared.dev.topics import unique_name

if TYPE_CHECKING:
    from tests.coordinator.members import StartMember

WAIT_S = 15.0
"""Bound on every wait for an event: generous for a loaded 2-core machine, never a sleep."""

NAMESPACE = "/keyshared-tests"

T = TypeVar("T")

ClientFactory = Callable[..., KazooClient]


@pytest.fixture
def zk_client(zookeeper_hosts: str) -> Iterator[ClientFactory]:
    """Factory of started kazoo clients (one per simulated member), closed after the test."""
    clients: list[KazooClient] = []

    def make(session_timeout: float = 10.0, **options: object) -> KazooClient:
        client = KazooClient(hosts=zookeeper_hosts, timeout=session_timeout, **options)
        client.start(timeout=WAIT_S)
        clients.append(client)
        return client

    yield make
    for client in clients:
        try:
            client.stop()
            client.close()
        except Exception:
            pass


@pytest.fixture
def layout(zk_client: ClientFactory) -> Iterator[GroupLayout]:
    """A fresh group (directories created) under the tests' namespace, deleted afterwards."""
    group = GroupLayout(unique_name("group"), NAMESPACE)
    admin = zk_client()
    group.ensure(admin)
    yield group
    with contextlib.suppress(Exception):
        admin.delete(group.root, recursive=True)


@pytest.fixture
def start(kafka_bootstrap: str, zookeeper_hosts: str, new_topic: object) -> Iterator[StartMember]:
    """Members on threads of the test, each with its own session (``members_for``), stopped
    after the test. It depends on ``new_topic`` so that its members stop before their topics
    are deleted: a final commit to a deleted topic is retried for ``drain_timeout``."""
    # Imported here: members.py imports NAMESPACE from this module.
    from tests.coordinator.members import members_for

    yield from members_for(kafka_bootstrap, zookeeper_hosts)


@pytest.fixture
def admin(zookeeper_hosts: str) -> Iterator[ZooKeeperCoordinator]:
    """A coordinator of its own under the tests' namespace, for status reads and for changing
    what members see (pins, leases) from outside."""
    with ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE) as zk:
        yield zk


@pytest.fixture
def zk(zookeeper_hosts: str) -> Iterator[ZooKeeperCoordinator]:
    """As ``admin`` but under the default namespace, where ``keyshared run`` processes (which
    these tests start without ``--namespace``) keep their data."""
    with ZooKeeperCoordinator(zookeeper_hosts) as coordinator:
        yield coordinator


def expire_session(client: KazooClient, hosts: str) -> None:
    """Expire ``client``'s session on the server, as a crash past the session timeout would.

    A second client attaches to the same session (id and password) and closes it: ZooKeeper
    ends the session, deletes its ephemeral znodes at once, and ``client`` learns LOST when it
    reconnects. Returns once ``client`` has seen LOST and is connected with a new session.
    """
    lost, renewed = threading.Event(), threading.Event()

    def listener(state: str) -> bool:
        if state == KazooState.LOST:
            lost.set()
        elif state == KazooState.CONNECTED and lost.is_set():
            renewed.set()
            return True
        return False

    client.add_listener(listener)
    session_id, password = client.client_id
    deadline = time.monotonic() + WAIT_S
    while not lost.is_set():
        # The twin's attach drops ``client``'s connection, and ``client`` reconnects at once
        # (its one server is listed several times: coordinator.session.handshake_hosts),
        # which may take the session back before the twin closes it. Then the twin tries again.
        assert time.monotonic() < deadline, "the client never learned its session expired"
        twin = KazooClient(hosts=hosts, client_id=(session_id, password))
        with contextlib.suppress(KazooTimeoutError):  # taken back all along: again
            twin.start(timeout=5.0)
        twin.stop()
        twin.close()
        lost.wait(1.0)
    assert renewed.wait(WAIT_S), "the client never reconnected with a new session"
    assert client.client_id[0] != session_id


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def take(q: queue.Queue[T], what: str, timeout: float = WAIT_S) -> T:
    """The next item of ``q``, failing the test with ``what`` if none comes in time."""
    try:
        return q.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}") from None


def take_until(q: queue.Queue[T], accept: Callable[[T], bool], what: str) -> T:
    """Items of ``q`` until one is accepted (earlier states of a converging process are fine)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out waiting for {what}")
        item = take(q, what, remaining)
        if accept(item):
            return item


__all__ = [
    "NAMESPACE",
    "WAIT_S",
    "ClientFactory",
    "closed_port",
    "expire_session",
    "take",
    "take_until",
]
