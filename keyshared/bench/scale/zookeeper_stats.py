"""What the ZooKeeper server itself says: four-letter words (``mntr``, ``stat``), the CPU time of
a private server, and the private server (the dev cluster's jars on a free port).

Apart from the simulated members because every measurement (the group runs and the write
capacity) reads the same counters before and after, and a private server's counters count
only this run.
"""

from __future__ import annotations

import contextlib
import re
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["SERVER_PID", "delta", "four_letter", "mntr", "private_zookeeper", "server_cpu_s"]


def four_letter(hosts: str, word: str, timeout: float = 5.0) -> str:
    """The answer of the first server in ``hosts`` to a four-letter word."""
    host, _, port = hosts.split(",")[0].rpartition(":")
    with socket.create_connection((host or "127.0.0.1", int(port)), timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def mntr(hosts: str) -> dict[str, float]:
    """``mntr``'s numeric counters, plus ``zxid`` from ``stat`` (one per write transaction)."""
    counters: dict[str, float] = {}
    try:
        for line in four_letter(hosts, "mntr").splitlines():
            key, _, value = line.partition("\t")
            with contextlib.suppress(ValueError):
                counters[key] = float(value)
        match = re.search(r"Zxid: 0x([0-9a-f]+)", four_letter(hosts, "stat"))
    except OSError:  # a server that does not allow the words: no counters
        return counters
    if match:
        counters["zxid"] = float(int(match.group(1), 16) & 0xFFFFFFFF)
    return counters


def delta(after: dict[str, float], before: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


SERVER_PID: dict[str, int] = {}  # hosts -> pid of a private server (for its CPU time)


def server_cpu_s(hosts: str) -> float:
    """CPU seconds the private ZooKeeper server at ``hosts`` used so far (0: not ours)."""
    pid = SERVER_PID.get(hosts)
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def private_zookeeper(heap_mb: int = 512) -> Iterator[str]:
    """A standalone ZooKeeper of the dev cluster's jars and settings on a free loopback port,
    stopped (its pid only) on exit. Yields ``127.0.0.1:port``."""
    from keyshared.dev import process, zookeeper
    from keyshared.dev.jars import fetch_jars
    from keyshared.dev.ports import LOOPBACK, free_ports
    from keyshared.dev.tools import find_java

    with tempfile.TemporaryDirectory(prefix="keyshared-scale-") as runtime:
        files = zookeeper.zookeeper_files(Path(runtime))
        port = free_ports(1)[0]
        zookeeper.write_config(files, port)
        command = zookeeper.server_command(find_java(), fetch_jars(), files, heap_mb)
        pid = process.spawn(command, files.console_file, files.home)
        try:
            deadline = time.monotonic() + 60
            while not zookeeper.answers_ruok(port):
                if time.monotonic() > deadline or not process.is_running(pid, str(files.config)):
                    raise RuntimeError(f"ZooKeeper did not start (see {files.console_file})")
                time.sleep(0.2)
            hosts = f"{LOOPBACK}:{port}"
            SERVER_PID[hosts] = pid
            yield hosts
        finally:
            process.stop(pid, str(files.config), 10.0)
