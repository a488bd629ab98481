"""Free loopback ports for the local cluster.

Kafka's 9092 and ZooKeeper's 2181 are never assumed free: a developer may run another broker,
and test sessions run clusters side by side. Ports are picked by the kernel (bind to port 0).
"""

from __future__ import annotations

import contextlib
import socket

__all__ = ["LOOPBACK", "accepts_connections", "free_ports", "port_is_free"]

LOOPBACK = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """Return `count` distinct ports that are free on 127.0.0.1 right now.

    All sockets stay bound until every port is chosen, so the kernel cannot hand out the same
    port twice within one call. A port can still be taken between this call and the server's
    bind; the server then fails to start and its log says so.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((LOOPBACK, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_free(port: int) -> bool:
    """Whether a server could bind 127.0.0.1:`port` now.

    SO_REUSEADDR mirrors what the JVM sets on server sockets, so connections of a stopped
    server lingering in TIME_WAIT do not count as "in use" (a restart on the same port works).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def accepts_connections(port: int, timeout: float = 0.5) -> bool:
    """Whether something listens on 127.0.0.1:`port` (a cheap probe before a protocol probe)."""
    with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout):
        return True
    return False
