"""The ZooKeeper servers of the local cluster: standalone `ZooKeeperServerMain` on loopback, or
the `QuorumPeerMain` members of an ensemble.

This module knows ZooKeeper's files, flags and the `ruok` probe; process control and waiting
live in `cluster.py`. Every setting that differs from ZooKeeper's default is in
`server_settings`, with the reason.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from keyshared.dev.files import ServerFiles
from keyshared.dev.jars import classpath
from keyshared.dev.logconfig import write_log4j2_config
from keyshared.dev.ports import LOOPBACK

ZooKeeperFiles = ServerFiles  # the layout is shared; the alias keeps signatures readable

__all__ = [
    "EnsemblePeer",
    "ZooKeeperFiles",
    "answers_ruok",
    "ensemble_settings",
    "server_command",
    "server_mode",
    "server_settings",
    "write_config",
    "zookeeper_files",
]


def zookeeper_files(runtime_dir: Path) -> ZooKeeperFiles:
    """Where this server's files live inside ``runtime_dir``."""
    return ServerFiles.in_runtime(runtime_dir, "zookeeper", "zoo.cfg")


def server_settings(files: ZooKeeperFiles, port: int) -> dict[str, str]:
    """zoo.cfg, each deviation from ZooKeeper's defaults with its reason."""
    return {
        "dataDir": str(files.data),
        "clientPort": str(port),
        # Loopback only: a dev server must not be reachable from the network.
        "clientPortAddress": LOOPBACK,
        # A 500 ms tick lets tests use sessions down to 1 s, so session-expiry tests are quick
        # (the minimum session is 2 ticks and expiry is checked once per tick).
        "tickTime": "500",
        "minSessionTimeout": "1000",
        "maxSessionTimeout": "60000",
        # Every client of a test run comes from 127.0.0.1; the default cap of 60 per address
        # would refuse connections in a busy session.
        "maxClientCnxns": "0",
        # The four-letter words the readiness probe and `keyshared dev status` use.
        "4lw.commands.whitelist": "ruok,stat,mntr",
        # The admin server (Jetty, port 8080) is neither wanted nor on the classpath.
        "admin.enableServer": "false",
        # Old snapshots and logs are of no use to a dev server; keep the data folder small.
        "autopurge.snapRetainCount": "3",
        "autopurge.purgeInterval": "1",
    }


@dataclass(frozen=True)
class EnsemblePeer:
    """One member of a ZooKeeper ensemble: its id (``myid``) and its three loopback ports."""

    node_id: int
    client_port: int
    quorum_port: int
    election_port: int


def ensemble_settings(
    files: ZooKeeperFiles, me: EnsemblePeer, peers: Sequence[EnsemblePeer]
) -> dict[str, str]:
    """zoo.cfg of one ensemble member: :func:`server_settings` plus the ensemble's."""
    settings = server_settings(files, me.client_port)
    settings.update({
        # Ticks a follower may take to connect and sync to a leader (10 s), and to lag behind
        # it (5 s) at the 500 ms tick. 2.5 s of lag (syncLimit 5) was too little on a shared
        # two-core machine: at load averages near 100 the ensemble dropped its followers and,
        # with them, every client, and 4 s sessions expired.
        "initLimit": "20",
        "syncLimit": "10",
        # `srvr` says whether a member serves, and as leader or follower (`ruok` answers
        # `imok` even while a member has no quorum): the readiness probe and the chaos runs.
        "4lw.commands.whitelist": "ruok,stat,mntr,srvr",
        # No dynamic reconfiguration: the ensemble is the static list below.
        "reconfigEnabled": "false",
        "standaloneEnabled": "false",
    })  # fmt: skip
    for peer in peers:
        settings[f"server.{peer.node_id}"] = (
            f"{LOOPBACK}:{peer.quorum_port}:{peer.election_port}:participant"
        )
    return settings


def write_config(
    files: ZooKeeperFiles,
    port: int,
    *,
    me: EnsemblePeer | None = None,
    peers: Sequence[EnsemblePeer] = (),
) -> None:
    """Write zoo.cfg (an ensemble member's, with its ``myid`` file, when ``me`` is given) and
    the Log4j 2 file."""
    files.home.mkdir(parents=True, exist_ok=True)
    files.data.mkdir(parents=True, exist_ok=True)
    if me is not None:
        settings = ensemble_settings(files, me, peers)
        (files.data / "myid").write_text(f"{me.node_id}\n")
    else:
        settings = server_settings(files, port)
    body = "".join(f"{key}={value}\n" for key, value in settings.items())
    files.config.write_text("# Written by keyshared dev on every start; edits are lost.\n" + body)
    write_log4j2_config(files.log4j_config, files.log_file, {})


def server_command(
    java: str, jars_dir: Path, files: ZooKeeperFiles, heap_mb: int, *, ensemble: bool = False
) -> list[str]:
    """The server's `java` command line (`QuorumPeerMain` for an ensemble member)."""
    main = (
        "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        if ensemble
        else "org.apache.zookeeper.server.ZooKeeperServerMain"
    )
    return [
        java, f"-Xmx{heap_mb}m",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={files.log4j_config}",
        f"-Dzookeeper.log.dir={files.log_file.parent}",
        "-cp", classpath(jars_dir),
        main, str(files.config),
    ]  # fmt: skip


def answers_ruok(port: int, timeout: float = 1.0, host: str = LOOPBACK) -> bool:
    """Whether the server on `host`:`port` answers the `ruok` four-letter word with `imok`."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(b"ruok")
        reply = b""
        while chunk := sock.recv(16):
            reply += chunk
        return reply == b"imok"
    return False


def server_mode(port: int, timeout: float = 1.0, host: str = LOOPBACK) -> str | None:
    """An ensemble member's role from `srvr`: ``leader``, ``follower`` or ``standalone``; None
    while it does not serve clients (no quorum) or does not answer."""
    reply = b""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(b"srvr")
        while chunk := sock.recv(4096):
            reply += chunk
    for line in reply.decode(errors="replace").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None
