"""The fault proxy's delay line, against a local echo server: the latency it adds is the delay
asked for, each way; the stream's order is kept; and chunks sent back to back arrive back to
back (the delay is not paid once per chunk)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.partitions.proxy import FaultyLink

DELAY_S = 0.5
# Scheduling on a loaded 2-core machine (a CI run beside Kafka, ZooKeeper and the suite). Kept
# below ``2 * DELAY_S`` so each bound still tells its failure apart: a delay paid twice each
# way takes ``4 * DELAY_S``, and a heal that left the delay takes ``2 * DELAY_S``.
SLACK_S = 0.9


@pytest.fixture
def echo() -> Iterator[str]:
    """``host:port`` of a server that sends back whatever it receives."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the proxy closed the connection"
        data += chunk
    return data


def test_a_delay_adds_its_latency_each_way_and_heal_removes_it(echo: str) -> None:
    with FaultyLink(echo) as link, socket.create_connection(("127.0.0.1", link.port)) as sock:
        sock.settimeout(10)
        sock.sendall(b"warm")
        assert _read(sock, 4) == b"warm"
        link.delay(DELAY_S)
        sent = time.monotonic()
        sock.sendall(b"ping")
        assert _read(sock, 4) == b"ping"
        round_trip = time.monotonic() - sent
        assert 2 * DELAY_S <= round_trip < 2 * DELAY_S + SLACK_S
        link.heal()
        sent = time.monotonic()
        sock.sendall(b"pong")
        assert _read(sock, 4) == b"pong"
        assert time.monotonic() - sent < SLACK_S


def test_chunks_sent_back_to_back_arrive_back_to_back_and_in_order(echo: str) -> None:
    """Serialised delays would take chunks times the delay; a delay line takes the delay once."""
    chunks = [f"{i:04d}".encode() for i in range(40)]
    with FaultyLink(echo) as link, socket.create_connection(("127.0.0.1", link.port)) as sock:
        sock.settimeout(30)
        link.delay(DELAY_S)
        sent = time.monotonic()
        for chunk in chunks:
            sock.sendall(chunk)
            time.sleep(0.005)  # separate chunks for the proxy, not one coalesced segment
        sending = time.monotonic() - sent
        assert _read(sock, 4 * len(chunks)) == b"".join(chunks)
        elapsed = time.monotonic() - sent
    assert elapsed >= 2 * DELAY_S
    assert elapsed < sending + 2 * DELAY_S + SLACK_S, (
        f"{len(chunks)} chunks took {elapsed:.2f}s: the delays were paid one after another"
    )


def test_a_negative_delay_is_refused(echo: str) -> None:
    with FaultyLink(echo) as link, pytest.raises(ValueError, match="not negative"):
        link.delay(-1.0)
