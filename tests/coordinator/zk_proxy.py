"""A TCP proxy in front of ZooKeeper whose connections a test cuts and restores.

A member connected through it loses its ZooKeeper connection (kazoo: SUSPENDED) while its
session lives on in the server; restored within the session timeout, it reconnects to the same
session (RESUMED). The server and every other client are untouched, unlike a server restart.
The proxy itself is :class:`tests.partitions.proxy.FaultyLink` (which can also blackhole).
"""

from __future__ import annotations

from tests.partitions.proxy import FaultyLink

__all__ = ["ZooKeeperProxy"]


class ZooKeeperProxy(FaultyLink):
    """Forwards ``127.0.0.1:<port>`` to ``upstream`` (``host:port``) until :meth:`cut`.

    :param upstream: the real ZooKeeper, ``host:port`` (the first of a list).
    """

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.hosts = self.address

    def restore(self) -> None:
        self.heal()
