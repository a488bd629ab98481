"""Free loopback ports for the local cluster.

Kafka's 9092 and ZooKeeper's 2181 are never assumed free: a developer may run another broker,
and test sessions run clusters side by side. Ports are picked by the kernel (bind to port 0).
"""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

__all__ = ["LOOPBACK", "accepts_connections", "free_ports", "port_is_free"]

LOOPBACK = "127.0.0.1"
_FIRST_PORT = 20000  # below this live many well-known services; stay clear of them


def free_ports(count: int) -> list[int]:
    """Return `count` distinct ports that are free on 127.0.0.1 right now, outside the
    kernel's ephemeral range.

    Why outside: while a server is down for a restart, its clients keep reconnecting from
    ephemeral ports, and a client can be handed the server's own port and connect to itself
    (TCP self-connect), which then holds the port and makes the restart fail. A server port
    the kernel never hands to clients cannot be taken that way.

    All sockets stay bound until every port is chosen, so one call never returns a port twice.
    A port can still be taken between this call and the server's bind; the server then fails
    to start and its log says so.
    """
    low, high = _ephemeral_range()
    candidates = [p for p in range(_FIRST_PORT, 65536) if not low <= p <= high]
    random.shuffle(candidates)
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        for port in candidates:
            if len(ports) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
            ports.append(port)
        if len(ports) < count:
            raise OSError(f"no {count} free ports on {LOOPBACK} outside {low}-{high}")
        return ports
    finally:
        for sock in sockets:
            sock.close()


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's client port range (Linux); a conservative default elsewhere."""
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        low, high = (int(x) for x in text.split())
        return low, high
    except (OSError, ValueError):
        return 32768, 65535


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
