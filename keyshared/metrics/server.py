"""The HTTP endpoint of one process: ``/metrics`` for Prometheus, ``/hotkeys`` for people,
``/healthz`` and ``/readyz`` for orchestrators.

Why a small WSGI app instead of ``prometheus_client.start_http_server``: that server serves only
the exposition, and hot keys must not become metric labels (keys are unbounded). So the same port
serves a JSON view of the busiest and slowest keys, produced on request by a callable the
consumer supplies. The probes answer 200 or 503 with a JSON body whose ``reasons`` say why
(Kubernetes only reads the status code; people read the body).

Multi-process deployments: run one endpoint per process, each on its own port, and let Prometheus
scrape every process (the ``member`` label tells them apart). prometheus-client's multiprocess
mode is not used: it is built for pre-fork web servers and cannot remove the series of a revoked
partition.

Example::

    server = start_metrics_server(0)            # port 0: any free port
    print(server.url)                           # http://127.0.0.1:40123/metrics
    server.close()
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, make_wsgi_app
from prometheus_client.registry import CollectorRegistry

__all__ = ["HealthSource", "HotKeysSource", "MetricsServer", "key_text", "start_metrics_server"]

HotKeysSource = Callable[[], dict[str, object]]


class _Verdict(Protocol):
    @property
    def ok(self) -> bool: ...

    def body(self) -> dict[str, object]: ...


class HealthSource(Protocol):
    """What answers the probes (:class:`keyshared.consumer.health_view.HealthView`)."""

    def liveness(self) -> _Verdict: ...

    def readiness(self) -> _Verdict: ...


_StartResponse = Callable[..., Any]


def key_text(key: bytes | None) -> str | None:
    """Render a message key for people: its text when UTF-8, else ``0x`` and its hex digits."""
    if key is None:
        return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + key.hex()


def _json_default(value: object) -> object:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return key_text(bytes(value))
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot render {type(value).__name__} as JSON")


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    # Rebinding a port right after a restart must not fail on TIME_WAIT sockets.
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds would flood stderr; access logs belong to the scraper."""


class MetricsServer:
    """A running endpoint; stop it with :meth:`close`."""

    def __init__(self, server: WSGIServer, thread: threading.Thread, host: str) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        self.port: int = server.server_port

    @property
    def url(self) -> str:
        """The ``/metrics`` URL, handy for logs and scrape configs."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port; idempotent."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _app(
    registry: CollectorRegistry, hotkeys: HotKeysSource | None, health: HealthSource | None
) -> Callable[[dict[str, Any], _StartResponse], Iterable[bytes]]:
    metrics_app = make_wsgi_app(registry)

    def send(start: _StartResponse, status: str, body: object) -> list[bytes]:
        data = json.dumps(body, default=_json_default, indent=1).encode()
        start(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def app(environ: dict[str, Any], start_response: _StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/").rstrip("/") or "/"
        if path in ("/", "/metrics"):
            result: Iterable[bytes] = metrics_app(environ, start_response)
            return result
        if path == "/hotkeys":
            if hotkeys is None:
                return send(start_response, "404 Not Found", {"error": "no hot-key source"})
            try:
                body = hotkeys()
            except Exception as exc:  # a broken view must not take the endpoint down
                return send(start_response, "500 Internal Server Error", {"error": repr(exc)})
            return send(start_response, "200 OK", body)
        if path in ("/healthz", "/readyz"):
            if health is None:
                return send(start_response, "404 Not Found", {"error": "no health source"})
            try:
                verdict = health.liveness() if path == "/healthz" else health.readiness()
            except Exception as exc:  # a probe that cannot decide must not pass
                return send(start_response, "503 Service Unavailable", {"error": repr(exc)})
            status = "200 OK" if verdict.ok else "503 Service Unavailable"
            return send(start_response, status, verdict.body())
        return send(start_response, "404 Not Found", {"error": f"no such path: {path}"})

    return app


def start_metrics_server(
    port: int,
    host: str = "127.0.0.1",
    hotkeys: HotKeysSource | None = None,
    registry: CollectorRegistry = REGISTRY,
    health: HealthSource | None = None,
) -> MetricsServer:
    """Serve ``/metrics``, ``/hotkeys``, ``/healthz`` and ``/readyz`` on a daemon thread.

    :param port: TCP port; ``0`` picks a free one (read it back from ``MetricsServer.port``).
    :param host: bind address; loopback by default so nothing is exposed by accident, ``0.0.0.0``
        in a container.
    :param hotkeys: returns the JSON-able hot-key view; ``bytes`` inside it are rendered with
        :func:`key_text`.
    :param registry: where the exposition comes from; the default holds keyshared's families.
    :param health: answers ``/healthz`` (liveness) and ``/readyz`` (readiness); 404 without.
    """
    app = _app(registry, hotkeys, health)
    server = make_server(host, port, app, server_class=_Server, handler_class=_QuietHandler)
    thread = threading.Thread(
        target=server.serve_forever, name=f"keyshared-metrics-{server.server_port}", daemon=True
    )
    thread.start()
    return MetricsServer(server, thread, host)
