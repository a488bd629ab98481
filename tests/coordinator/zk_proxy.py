"""A TCP proxy in front of ZooKeeper whose connections a test cuts, slows and restores.

A member connected through it loses its ZooKeeper connection (kazoo: SUSPENDED) while its
session lives on in the server; restored within the session timeout, it reconnects to the same
session (RESUMED). The server and every other client are untouched, unlike a server restart.
The proxy itself is :class:`tests.partitions.proxy.FaultyLink` (which can also blackhole and
delay); this class adds what needs ZooKeeper's wire protocol: :meth:`lose_next_write_reply`.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from tests.partitions.proxy import FaultyLink

__all__ = ["WRITE_OPS", "Frames", "ZooKeeperProxy"]

WRITE_OPS = frozenset({1, 2, 5, 7, 14, 15, 16, 19, 20, 21})
"""Request types that change the tree (jute ``OpCode``): create, delete, setData, setACL,
multi, create2, reconfig, createContainer, deleteContainer, createTTL."""
_LENGTH = struct.Struct(">i")
_REQUEST = struct.Struct(">ii")  # xid, type
_REPLY = struct.Struct(">iqi")  # xid, zxid, err


@dataclass
class Frames:
    """One direction of one connection, cut into frames (4-byte length, then the body). The
    first frame of either direction is the session handshake, which has no xid."""

    buffer: bytearray = field(default_factory=bytearray)
    consumed: int = 0  # bytes of the stream before ``buffer``
    handshake: bool = True

    def feed(self, data: bytes, header: int) -> list[tuple[int, bytes]]:
        """Append ``data``; return each frame it completed, as (its start in the stream, its
        first ``header`` body bytes)."""
        self.buffer += data
        found = []
        while len(self.buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self.buffer)
            end = _LENGTH.size + length
            if len(self.buffer) < end:
                break
            if self.handshake:
                self.handshake = False
            elif length >= header:
                found.append(
                    (self.consumed, bytes(self.buffer[_LENGTH.size : _LENGTH.size + header]))
                )
            del self.buffer[:end]
            self.consumed += end
        return found


@dataclass
class _Connection:
    requests: Frames = field(default_factory=Frames)
    replies: Frames = field(default_factory=Frames)
    replied: int = 0  # bytes of the reply stream forwarded so far
    writes: set[int] = field(default_factory=set)  # xids of write requests not answered yet


class ZooKeeperProxy(FaultyLink):
    """Forwards ``127.0.0.1:<port>`` to ``upstream`` (``host:port``) until :meth:`cut`.

    :param upstream: the real ZooKeeper, ``host:port`` (the first of a list).
    """

    def __init__(self, upstream: str) -> None:
        self._connections: dict[socket.socket, _Connection] = {}
        self._armed = threading.Event()
        self.lost_replies: list[tuple[int, int]] = []  # (monotonic ns, xid) of each reply lost
        self.connections = 0  # connections that went through, ever
        super().__init__(upstream)
        self.hosts = self.address

    def restore(self) -> None:
        self.heal()

    def lose_next_write_reply(self) -> None:
        """Drop the next successful reply to a write on any connection, and the connection
        with it: ZooKeeper applied the request, the client never learns it. kazoo fails the
        request with ConnectionLoss and reconnects to the same session (RESUMED).
        :attr:`lost_replies` grows by one when it happened."""
        self._armed.set()

    def disarm(self) -> None:
        """Lose nothing more (a :meth:`lose_next_write_reply` that has not fired yet)."""
        self._armed.clear()

    def _opened(self, client: socket.socket, server: socket.socket) -> None:
        self._connections[client] = _Connection()
        self.connections += 1

    def _forward(self, client: socket.socket, upstream: bool, data: bytes) -> tuple[bytes, bool]:
        conn = self._connections.get(client)
        if conn is None:
            return data, True
        if upstream:
            for _, body in conn.requests.feed(data, _REQUEST.size):
                xid, op = _REQUEST.unpack(body)
                if op in WRITE_OPS:
                    conn.writes.add(xid)
            return data, True
        start = conn.replied
        conn.replied += len(data)
        for at, body in conn.replies.feed(data, _REPLY.size):
            xid, _, err = _REPLY.unpack(body)
            if xid not in conn.writes:
                continue
            conn.writes.discard(xid)
            if err == 0 and self._armed.is_set():
                self._armed.clear()
                self.lost_replies.append((time.monotonic_ns(), xid))
                self._connections.pop(client, None)
                return data[: max(0, at - start)], False
        return data, True
