"""A loopback TCP proxy whose traffic a test cuts, blackholes and heals: partial partitions.

One member's path to one server goes through it, every other path stays direct, so a test can
cut a member off from ZooKeeper but not Kafka, or the reverse, without touching the servers:

- :meth:`~FaultyLink.cut` drops every connection and refuses new ones (they are accepted and
  closed at once): what a client sees when a peer's host is down or a firewall sends resets.
- :meth:`~FaultyLink.blackhole` keeps every connection open but forwards nothing, and accepts
  new ones into the same silence: a switch that drops packets. Clients notice only through
  their own timeouts.
- :meth:`~FaultyLink.delay` forwards everything, each chunk ``seconds`` after it arrived, in
  each direction: a slow network that loses nothing. A delay line, not a sleep per chunk:
  chunks that arrive back to back leave back to back, so the delay adds latency but does not
  cut the throughput.
- :meth:`~FaultyLink.hang_new` accepts new connections and neither answers nor closes them,
  even after a heal: a server that took a connection while it was starting and never served
  it (seen from ZooKeeper restarting under load). Open connections are left alone.
- :meth:`~FaultyLink.heal` forwards again at once: new connections go through; connections
  held in a blackhole are dropped (their peers have lost bytes, so the stream cannot go on).

Example::

    link = FaultyLink("127.0.0.1:2181")
    zk = ZooKeeperCoordinator(link.address)   # this member reaches ZooKeeper through the link
    link.cut(); ...; link.heal()
"""

from __future__ import annotations

import contextlib
import enum
import queue
import socket
import threading
import time

__all__ = ["FaultyLink", "LinkState"]


class LinkState(enum.Enum):
    OPEN = "open"
    CUT = "cut"
    BLACKHOLE = "blackhole"
    HANG_NEW = "hang_new"


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
        self.latency = 0.0  # seconds each chunk is held, per direction (:meth:`delay`)
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._hung: list[socket.socket] = []  # held by hang_new until the link closes
        self.hung = threading.Event()  # a connection was taken into a hang
        self._closed = False
        threading.Thread(target=self._accept, name=f"link-{self.port}", daemon=True).start()

    def cut(self) -> None:
        """Drop every connection and refuse new ones."""
        self.state = LinkState.CUT
        self._drop_all()

    def blackhole(self) -> None:
        """Keep connections open but forward nothing (new ones are accepted into silence)."""
        self.state = LinkState.BLACKHOLE

    def hang_new(self) -> None:
        """Accept new connections and never answer or close them (a heal leaves them hung)."""
        self.state = LinkState.HANG_NEW

    def delay(self, seconds: float) -> None:
        """Forward every chunk ``seconds`` after it arrived (each way), order kept."""
        if seconds < 0:
            raise ValueError(f"a delay is not negative, got {seconds}")
        self.latency = seconds

    def heal(self) -> None:
        """Forward again, without delay; connections held in a blackhole are dropped (bytes
        were lost). Chunks already delayed still leave at their time, in order."""
        was = self.state
        self.state = LinkState.OPEN
        self.latency = 0.0
        if was is LinkState.BLACKHOLE:
            self._drop_all()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self._drop_all()
        with self._lock:
            hung, self._hung = self._hung, []
        for sock in hung:
            sock.close()

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
            if self.state is LinkState.HANG_NEW:
                with self._lock:
                    self._hung.append(client)
                self.hung.set()
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
            self._opened(client, server)
            for a, b, upstream in ((client, server, True), (server, client, False)):
                line: queue.SimpleQueue[tuple[float, bytes | None]] = queue.SimpleQueue()
                threading.Thread(
                    target=self._receive, args=(a, b, upstream, line), daemon=True
                ).start()
                threading.Thread(target=self._send, args=(line, a, b), daemon=True).start()

    def _opened(self, client: socket.socket, server: socket.socket) -> None:
        """A connection went through (a hook for subclasses that follow a protocol)."""

    def _forward(self, client: socket.socket, upstream: bool, data: bytes) -> tuple[bytes, bool]:
        """What of ``data`` (received from the client if ``upstream``, else from the server)
        goes on, and whether the connection goes on after it (a hook for subclasses that
        lose chosen messages: the rest of the stream is lost with the connection)."""
        return data, True

    def _receive(
        self,
        source: socket.socket,
        sink: socket.socket,
        upstream: bool,
        line: queue.SimpleQueue[tuple[float, bytes | None]],
    ) -> None:
        """The delay line's input: each chunk with the time it is due (arrival + latency)."""
        client = source if upstream else sink
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if self.state is not LinkState.OPEN:
                    continue  # swallowed, as a dropping switch would
                passed, going_on = self._forward(client, upstream, data)
                line.put((time.monotonic() + self.latency, passed))
                if not going_on:
                    break
        line.put((time.monotonic() + self.latency, None))

    def _send(
        self,
        line: queue.SimpleQueue[tuple[float, bytes | None]],
        source: socket.socket,
        sink: socket.socket,
    ) -> None:
        """The delay line's output: every chunk at its due time, in arrival order; the end of
        the stream (None) closes both sides, once what came before it is sent."""
        with contextlib.suppress(OSError):
            while True:
                due, data = line.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)  # the latency itself: this chunk is not due yet
                if data is None:
                    break
                if self.state is LinkState.OPEN:
                    sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
