"""Free loopback ports for the local cluster, and which of them each server uses.

Kafka's 9092 and ZooKeeper's 2181 are never assumed free: a developer may run another broker,
and test sessions run clusters side by side. Ports are picked at random outside the kernel's
ephemeral range and checked by binding them. A server keeps its ports across restarts (clients
configured with its address keep working) for as long as they stay free.
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import time
from pathlib import Path

from keyshared.dev.errors import PortInUseError
from keyshared.dev.state import ClusterState, KafkaRecord, ZooKeeperRecord

__all__ = [
    "LOOPBACK",
    "accepts_connections",
    "assign_ports",
    "await_port_released",
    "free_ports",
    "port_is_free",
]

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
_FIRST_PORT = 20000  # below this live many well-known services; stay clear of them
# How long a restart waits for a killed server's port to be released by the kernel.
_PORT_RELEASE_TIMEOUT_S = 60.0


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


def assign_ports(state: ClusterState, *, kafka_running: bool, zk_running: bool) -> None:
    """Keep recorded ports that are still free; pick new free ports for the rest.

    A running server keeps its ports (they are taken by itself). The pid of a server that is
    not running is cleared, so `state` only names processes that exist.
    """
    reusable_kafka = state.kafka is not None and (
        kafka_running
        or (port_is_free(state.kafka.port) and port_is_free(state.kafka.controller_port))
    )
    reusable_zk = state.zookeeper is not None and (zk_running or port_is_free(state.zookeeper.port))
    taken = {
        *((state.kafka.port, state.kafka.controller_port) if state.kafka else ()),
        *((state.zookeeper.port,) if state.zookeeper else ()),
    }
    fresh = iter(port for port in free_ports(6) if port not in taken)
    if not reusable_kafka:
        if state.kafka is not None:
            log.info("kafka's previous ports are taken; moving to new ones")
        state.kafka = KafkaRecord(port=next(fresh), controller_port=next(fresh))
    if not reusable_zk:
        if state.zookeeper is not None:
            log.info("zookeeper's previous port is taken; moving to a new one")
        state.zookeeper = ZooKeeperRecord(port=next(fresh))
    if not kafka_running:
        assert state.kafka is not None
        state.kafka.pid = None
    if not zk_running:
        assert state.zookeeper is not None
        state.zookeeper.pid = None


def await_port_released(server: str, port: int) -> None:
    """Wait until `server` could bind `port` again, for a restart on the same address.

    After a SIGKILL the dead server's orphaned connections hold its port for a moment
    (FIN_WAIT); this waits that out instead of failing the restart. A port that accepts a
    connection has another server listening on it: no wait will free it, so that fails at once.

    :raises PortInUseError: another process listens on the port, or it is still taken after a
        minute.
    """
    deadline = time.monotonic() + _PORT_RELEASE_TIMEOUT_S
    while not port_is_free(port):
        if _listening(port) or time.monotonic() > deadline:
            raise PortInUseError(server, port)
        time.sleep(0.2)


def _listening(port: int) -> bool:
    """Whether a server accepts connections on 127.0.0.1:``port`` (lingering connections of a
    dead one do not)."""
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0
