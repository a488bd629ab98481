"""The ZooKeeper proxy loses a write's reply after the server applied the write: the client
gets ConnectionLoss, reconnects to the same session, and finds the write done."""

from __future__ import annotations

import itertools
import struct
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss

from keyshared.dev.topics import unique_name
from tests.coordinator.conftest import NAMESPACE, WAIT_S
from tests.coordinator.zk_proxy import Frames, ZooKeeperProxy


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@given(
    bodies=st.lists(st.binary(min_size=8, max_size=40), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
)
def test_frames_are_found_however_the_stream_is_cut(bodies: list[bytes], cuts: list[int]) -> None:
    """The handshake is skipped; every later frame is reported once with its start, whatever
    chunks TCP delivered it in."""
    stream = b"".join(_frame(b) for b in [b"handshake", *bodies])
    points = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    parser = Frames()
    found = []
    for lo, hi in itertools.pairwise(points):
        found += parser.feed(stream[lo:hi], 8)
    starts, at = [], len(_frame(b"handshake"))
    for body in bodies:
        starts.append(at)
        at += len(_frame(body))
    assert found == [(start, body[:8]) for start, body in zip(starts, bodies, strict=True)]


@pytest.fixture
def proxy(zookeeper_hosts: str) -> Iterator[ZooKeeperProxy]:
    with ZooKeeperProxy(zookeeper_hosts) as link:
        yield link


def test_a_lost_write_reply_is_a_connection_loss_in_the_same_session(
    proxy: ZooKeeperProxy, zookeeper_hosts: str
) -> None:
    direct = KazooClient(hosts=zookeeper_hosts, timeout=10.0)
    client = KazooClient(hosts=proxy.hosts, timeout=10.0)
    states: list[KazooState] = []
    connected = threading.Event()

    def listen(state: KazooState) -> None:
        states.append(state)
        if state == KazooState.CONNECTED:
            connected.set()

    client.add_listener(listen)
    direct.start(timeout=WAIT_S)
    client.start(timeout=WAIT_S)
    try:
        path = f"{NAMESPACE}/{unique_name('lost-reply')}"
        direct.create(path, b"0", makepath=True)
        session = client.client_id
        proxy.lose_next_write_reply()
        assert client.get(path)[0] == b"0"  # a read's reply is not lost
        connected.clear()
        with pytest.raises(ConnectionLoss):
            client.set(path, b"1")
        assert len(proxy.lost_replies) == 1
        assert direct.get(path)[0] == b"1", "ZooKeeper applied the write"
        assert connected.wait(WAIT_S), "kazoo did not reconnect"
        assert client.client_id == session
        assert KazooState.SUSPENDED in states and KazooState.LOST not in states
        client.set(path, b"2")  # the proxy loses one reply only
        assert direct.get(path)[0] == b"2"
        direct.delete(path)
    finally:
        for c in (client, direct):
            c.stop()
            c.close()
