"""A loopback TCP proxy whose traffic a test cuts, blackholes and heals: partial partitions.

One member's path to one server goes through it, every other path stays direct, so a test can
cut a member off from ZooKeeper but not Kafka, or the reverse, without touching the servers:

- :meth:`~FaultyLink.cut` drops every connection and refuses new ones (they are accepted and
  closed at once): what a client sees when a peer's host is down or a firewall sends resets.
- :meth:`~FaultyLink.blackhole` keeps every connection open but forwards nothing, and accepts
  new ones into the same silence: a switch that drops packets. Clients notice only through
  their own timeouts.
- :meth:`~FaultyLink.heal` forwards again: new connections go through; connections held in a
  blackhole are dropped (their peers have lost bytes, so the stream cannot go on).

Example::

    link = FaultyLink("127.0.0.1:2181")
    zk = ZooKeeperCoordinator(link.address)   # this member reaches ZooKeeper through the link
    link.cut(); ...; link.heal()
"""

from __future__ import annotations

import contextlib
import enum
import socket
import threading

__all__ = ["FaultyLink", "LinkState"]


class LinkState(enum.Enum):
    OPEN = "open"
    CUT = "cut"
    BLACKHOLE = "blackhole"


class FaultyLink:
    """Forwards ``127.0.0.1:<port>`` to ``upstream`` (``host:port``) while :attr:`state` is open.

    :param upstream: the real server, ``host:port`` (the first of a comma-separated list).
    :param port: the port to listen on; 0 picks a free one (read :attr:`port`).
    """

    def __init__(self, upstream: str, port: int = 0) -> None:
        host, _, upstream_port = upstream.split(",")[0].rpartition(":")
        self._upstream = (host, int(upstream_port))
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port: int = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.state = LinkState.OPEN
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name=f"link-{self.port}", daemon=True).start()

    def cut(self) -> None:
        """Drop every connection and refuse new ones."""
        self.state = LinkState.CUT
        self._drop_all()

    def blackhole(self) -> None:
        """Keep connections open but forward nothing (new ones are accepted into silence)."""
        self.state = LinkState.BLACKHOLE

    def heal(self) -> None:
        """Forward again; connections held in a blackhole are dropped (bytes were lost)."""
        was = self.state
        self.state = LinkState.OPEN
        if was is LinkState.BLACKHOLE:
            self._drop_all()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self._drop_all()

    def __enter__(self) -> FaultyLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drop_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.state is LinkState.CUT:
                client.close()
                continue
            if self.state is LinkState.BLACKHOLE:
                with self._lock:
                    self._sockets.append(client)  # held silent until healed or cut
                continue
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if self.state is LinkState.OPEN:
                    sink.sendall(data)
                # else: swallowed, as a dropping switch would
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
