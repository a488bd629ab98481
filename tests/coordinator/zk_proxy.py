"""A TCP proxy in front of ZooKeeper whose connections a test cuts and restores.

A member connected through it loses its ZooKeeper connection (kazoo: SUSPENDED) while its
session lives on in the server; restored within the session timeout, it reconnects to the same
session (RESUMED). The server and every other client are untouched, unlike a server restart.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["ZooKeeperProxy"]


class ZooKeeperProxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream`` (``host:port``) until :meth:`cut`.

    :param upstream: the real ZooKeeper, ``host:port`` (the first of a list).
    """

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.split(",")[0].rpartition(":")
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.hosts = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._cut = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="zk-proxy", daemon=True).start()

    def cut(self) -> None:
        """Drop every connection and refuse new ones (they are accepted and closed)."""
        self._cut.set()
        self._drop_all()

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self._drop_all()

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
            if self._cut.is_set():
                client.close()
                continue
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
