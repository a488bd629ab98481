"""Smoke test of the session's ZooKeeper server through kazoo, the client keyshared uses."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat

from keyshared.dev.topics import unique_name

WAIT_S = 15.0


@pytest.fixture
def root(zookeeper_hosts: str) -> Iterator[str]:
    """A fresh znode path for this test, removed afterwards."""
    path = f"/keyshared-smoke/{unique_name('t')}"
    yield path
    client = KazooClient(hosts=zookeeper_hosts)
    client.start(timeout=WAIT_S)
    try:
        client.delete(path, recursive=True)
    finally:
        client.stop()
        client.close()


@pytest.fixture
def client(zookeeper_hosts: str) -> Iterator[KazooClient]:
    zk = KazooClient(hosts=zookeeper_hosts)
    zk.start(timeout=WAIT_S)
    yield zk
    zk.stop()
    zk.close()


def test_create_and_read(client: KazooClient, root: str) -> None:
    client.create(f"{root}/node", b"v1", makepath=True)
    data, stat = client.get(f"{root}/node")
    assert data == b"v1"
    assert stat.version == 0


def test_data_watch_fires_on_change(client: KazooClient, root: str) -> None:
    path = f"{root}/watched"
    client.create(path, b"v1", makepath=True)
    seen: queue.Queue[bytes | None] = queue.Queue()

    def on_data(data: bytes | None, _stat: ZnodeStat | None) -> None:
        seen.put(data)

    client.DataWatch(path, on_data)
    assert seen.get(timeout=WAIT_S) == b"v1"  # a DataWatch reports the current value first
    client.set(path, b"v2")
    assert seen.get(timeout=WAIT_S) == b"v2"


def test_ephemeral_node_disappears_after_session_closes(
    zookeeper_hosts: str, client: KazooClient, root: str
) -> None:
    client.ensure_path(root)
    path = f"{root}/member"
    owner = KazooClient(hosts=zookeeper_hosts)
    owner.start(timeout=WAIT_S)
    try:
        owner.create(path, b"alive", ephemeral=True)
        deleted = threading.Event()

        def on_event(event: WatchedEvent) -> None:
            if event.type == EventType.DELETED:
                deleted.set()

        assert client.exists(path, watch=on_event) is not None
    finally:
        owner.stop()
        owner.close()
    assert deleted.wait(WAIT_S), "the ephemeral node outlived its session"
    assert client.exists(path) is None
