"""Run Debian's ``prometheus`` on loopback and check the dashboard's queries against it.

Used by ``tests/ops/test_dashboard_queries.py`` and by hand (see ``docs/operations.md``)::

    keyshared run app:handle --group orders --topic orders --metrics-port 9464 ...   # elsewhere
    python -m tests.ops.prometheus --target 127.0.0.1:9464 --group orders --topic orders

Why a real Prometheus: a PromQL typo, a wrong label or a metric the exporter never produces only
shows up when the query is evaluated against scraped data; a syntax check would pass all three.
Targets are given through a file-SD file, so a test can add a consumer's endpoint after start.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["Prometheus", "PrometheusError", "free_port"]

BINARY = os.environ.get("KEYSHARED_PROMETHEUS", "/usr/bin/prometheus")


class PrometheusError(RuntimeError):
    """Prometheus did not start, or answered a query with an error."""


def free_port() -> int:
    """A port free right now on 127.0.0.1 (the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Prometheus:
    """One Prometheus server with its own temporary storage, scraping ``targets`` every second.

    Example::

        with Prometheus(["127.0.0.1:9464"]) as prom:
            prom.wait_for_scrapes(3)
            print(prom.query("up"))
    """

    def __init__(
        self,
        targets: Sequence[str] = (),
        scrape_interval: str = "1s",
        rule_files: Sequence[Path] = (),
    ) -> None:
        if shutil.which(BINARY) is None:
            raise PrometheusError(
                f"{BINARY} not found: apt-get install prometheus, or set KEYSHARED_PROMETHEUS"
            )
        self._dir = Path(tempfile.mkdtemp(prefix="keyshared-prometheus-"))
        self._targets: list[str] = list(targets)
        self._scrape_interval = scrape_interval
        self._rule_files = [str(Path(f).resolve()) for f in rule_files]
        self._proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and wait until it reports ready; retries once on a port race."""
        self._write_targets()
        (self._dir / "prometheus.yml").write_text(
            json.dumps(
                {
                    "global": {
                        "scrape_interval": self._scrape_interval,
                        "evaluation_interval": self._scrape_interval,
                    },
                    "rule_files": self._rule_files,
                    "scrape_configs": [
                        {
                            "job_name": "keyshared",
                            "scrape_timeout": self._scrape_interval,
                            "file_sd_configs": [
                                {
                                    "files": [str(self._dir / "targets.json")],
                                    "refresh_interval": "1s",
                                }
                            ],
                        }
                    ],
                }
            )
        )
        for attempt in range(3):
            self.port = free_port()
            log = (self._dir / "prometheus.log").open("ab")
            self._proc = subprocess.Popen(
                [
                    BINARY,
                    f"--config.file={self._dir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self._dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._dir,
            )
            log.close()
            if self._wait_ready(timeout):
                return
            self._terminate()
            if attempt == 2:
                break
        raise PrometheusError(f"prometheus did not become ready; log:\n{self.log()[-3000:]}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        return False

    def add_target(self, target: str) -> None:
        """Scrape one more ``host:port``; Prometheus picks the file change up within seconds."""
        self._targets.append(target)
        self._write_targets()

    def _write_targets(self) -> None:
        tmp = self._dir / "targets.json.tmp"
        tmp.write_text(json.dumps([{"targets": self._targets}]))
        tmp.replace(self._dir / "targets.json")

    def log(self) -> str:
        path = self._dir / "prometheus.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>``; returns ``data`` or raises :class:`PrometheusError`."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        if body.get("status") != "success":
            raise PrometheusError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query at the current time."""
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """Range query, the way Grafana's time-series panels ask."""
        data = self.api(
            "query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step}"
        )
        result: list[dict[str, Any]] = data["result"]
        return result

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded alerting/recording rule with its ``health`` and ``lastError``."""
        groups = self.api("rules")["groups"]
        return [rule for group in groups for rule in group["rules"]]

    def wait_until(
        self, expr: str, ok: Callable[[float], bool], timeout: float = 120.0, what: str = ""
    ) -> float:
        """Poll an instant query until its first sample satisfies ``ok``; return that value."""
        deadline = time.monotonic() + timeout
        last: object = "no series"
        while time.monotonic() < deadline:
            result = self.query(expr)
            if result:
                value = float(result[0]["value"][1])
                if ok(value):
                    return value
                last = value
            time.sleep(0.5)
        raise PrometheusError(f"timed out waiting for {what or expr}; last value: {last}")

    def wait_for_scrapes(self, n: int, timeout: float = 120.0) -> None:
        """Wait until every target has been scraped successfully at least ``n`` times."""
        targets = len(self._targets)
        self.wait_until(
            f'count(sum_over_time(up{{job="keyshared"}}[10m]) >= {n})',
            lambda v: v >= targets,
            timeout,
            f"{n} successful scrapes of {targets} target(s)",
        )

    def _terminate(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def stop(self) -> None:
        """Stop the server and delete its storage."""
        self._terminate()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Prometheus:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """Scrape running consumers, then evaluate every dashboard query; exit 1 if any is empty."""
    from .dashboard import DEFAULT_DASHBOARD
    from .synthetic import SyntheticExporter

    parser = argparse.ArgumentParser(
        prog="python -m tests.ops.prometheus", description=main.__doc__
    )
    parser.add_argument("--target", action="append", default=[], help="host:port to scrape")
    parser.add_argument(
        "--synthetic",
        action="store_true",
        help="scrape an in-process stand-in that drives every metric (no Kafka needed)",
    )
    parser.add_argument("--group", default="synthetic", help="value for the dashboard's $group")
    parser.add_argument("--topic", default="synthetic", help="value for the dashboard's $topic")
    parser.add_argument("--dashboard", type=Path, default=DEFAULT_DASHBOARD)
    parser.add_argument("--scrapes", type=int, default=5, help="scrapes to wait for first")
    parser.add_argument(
        "--optional",
        action="append",
        default=[],
        help="metric-name prefix whose panels may be empty (e.g. keyshared_coordinator_ "
        "when running without ZooKeeper)",
    )
    args = parser.parse_args(argv)
    exporter = SyntheticExporter(args.group, args.topic) if args.synthetic else None
    if exporter is not None:
        exporter.start()
        args.target.append(exporter.target)
    if not args.target:
        parser.error("give --target host:port (repeatable) or --synthetic")
    try:
        return _check(args)
    finally:
        if exporter is not None:
            exporter.close()


def _check(args: argparse.Namespace) -> int:
    from .dashboard import check_dashboard

    with Prometheus(args.target) as prom:
        start = time.time()
        print(f"prometheus on {prom.url}, scraping {', '.join(args.target)}")
        prom.wait_for_scrapes(args.scrapes)
        prom.wait_until(
            f'sum(keyshared_records_processed_total{{group="{args.group}"}})',
            lambda v: v > 0,
            what="processed records",
        )
        report = check_dashboard(
            prom, args.dashboard, args.group, args.topic, start, optional=tuple(args.optional)
        )
    print(report.table())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
