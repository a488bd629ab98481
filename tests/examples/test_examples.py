"""Each example runs as a user would run it (a subprocess, one command) against the real broker."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from keyshared.dev.topics import unique_name

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _env(bootstrap: str) -> dict[str, str]:
    return {**os.environ, "KEYSHARED_BOOTSTRAP_SERVERS": bootstrap, "PYTHONUNBUFFERED": "1"}


def _run(script: str, bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        env=_env(bootstrap),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_order_service_keeps_each_orders_events_in_order_and_dead_letters_bad_payments(
    kafka_bootstrap: str,
) -> None:
    done = _run(
        "order_service.py",
        kafka_bootstrap,
        "--orders",
        "300",
        "--bad-every",
        "100",
        "--topic",
        unique_name("ex-orders"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip().splitlines()[-1]
    assert "900/900 events of 300 orders" in line
    # 3 bad payments, each dead-lettered with the order's shipped event behind it.
    assert "dead-lettered 6 to" in line
    assert "out-of-order transitions 0" in line


def test_enrich_service_outputs_and_dead_letters_exactly_once(kafka_bootstrap: str) -> None:
    done = _run(
        "enrich_service.py",
        kafka_bootstrap,
        "--payments",
        "1000",
        "--bad-every",
        "250",
        "--topic",
        unique_name("ex-payments"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip().splitlines()[-1]
    assert "enriched 996/996 payments" in line, line
    assert "dead-lettered 4/4" in line, line
    assert "duplicates 0, per-customer order breaks 0" in line, line


def test_enrich_service_hands_the_active_role_over_exactly_once(
    kafka_bootstrap: str, zookeeper_hosts: str
) -> None:
    done = _run(
        "enrich_service.py",
        kafka_bootstrap,
        "--payments",
        "900",
        "--zookeeper",
        zookeeper_hosts,
        "--topic",
        unique_name("ex-payments-x"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip().splitlines()[-1]
    assert "enriched 900/900 payments" in line, line
    assert "duplicates 0, per-customer order breaks 0" in line, line
    assert "stopped after 300 payments" in line and "took over" in line, line


def test_batch_sqlite_writes_each_batch_in_one_transaction_in_per_account_order(
    kafka_bootstrap: str,
) -> None:
    done = _run(
        "batch_sqlite.py",
        kafka_bootstrap,
        "--events",
        "3000",
        "--accounts",
        "150",
        "--bad-every",
        "1000",
        "--topic",
        unique_name("ex-ledger"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip().splitlines()[-1]
    assert "3000/3000 events of 150 accounts" in line
    assert "dead-lettered 3 to" in line  # only the bad events, not their batches
    assert "out-of-order entries 0" in line
    transactions = int(re.search(r"(\d+) transactions", line).group(1))  # type: ignore[union-attr]
    assert transactions < 3000 / 2, line  # batches, not a commit per event


def test_async_handler_keeps_many_http_calls_in_flight(kafka_bootstrap: str) -> None:
    done = _run(
        "async_http.py",
        kafka_bootstrap,
        "--requests",
        "400",
        "--skus",
        "200",
        "--topic",
        unique_name("ex-prices"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "400/400 price checks" in done.stdout
    concurrent = int(re.search(r"saw up to (\d+) requests at once", done.stdout).group(1))  # type: ignore[union-attr]
    assert concurrent > 10, done.stdout  # a serial consumer would never exceed 1


def test_metrics_consumer_serves_prometheus_metrics_while_it_runs(kafka_bootstrap: str) -> None:
    command = [
        sys.executable,
        str(EXAMPLES / "metrics_consumer.py"),
        "--metrics-port",
        "0",
        "--seconds",
        "20",
        "--rate",
        "300",
        "--topic",
        unique_name("ex-sensors"),
    ]
    with subprocess.Popen(
        command,
        env=_env(kafka_bootstrap),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.match(r"metrics: (http://\S+)", first)
        assert match, first
        processed = 0.0
        deadline = time.monotonic() + 15
        while processed == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
            with urllib.request.urlopen(match.group(1), timeout=5) as response:
                text = response.read().decode()
            processed = sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("keyshared_records_processed_total{")
            )
        assert processed > 0, "no keyshared_records_processed_total was exported"
        assert "keyshared_handler_duration_seconds_bucket" in text
        base = match.group(1).rsplit("/", 1)[0]
        assert f"probes: {base}/healthz" in proc.stdout.readline()
        for probe in ("/healthz", "/readyz"):
            with urllib.request.urlopen(base + probe, timeout=5) as response:
                assert response.status == 200
                body = json.loads(response.read())
            assert body["status"] == "ok", body
        assert body["role"] == "member" and body["partitions"] == 3, body
        proc.terminate()  # SIGTERM: drain, commit, exit 0
        assert proc.wait(60) == 0
        assert "stopped after draining and committing" in proc.stdout.read()


def test_a_stuck_key_holds_back_only_itself(kafka_bootstrap: str) -> None:
    """Issue 23: every other key finishes while one hangs, and the commit says so in a few
    bytes of metadata (the committed offset stays on the stuck record)."""
    done = _run(
        "stuck_key.py", kafka_bootstrap, "--records", "5000", "--topic", unique_name("ex-stuck")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip().splitlines()[-1]
    assert "5000/5000 other records finished" in line, line
    assert "committed offset 0 (the stuck record), 5000 finished above it in 1 run(s)" in line, line
    size = int(re.search(r"(\d+) bytes of commit metadata", line).group(1))  # type: ignore[union-attr]
    assert 0 < size < 64, line


def test_a_stuck_key_holds_back_only_its_own_exactly_once_outputs(kafka_bootstrap: str) -> None:
    """With 5 % of 80,000 records on the hung key, the finished set outgrows the 4 KB commit
    metadata; every other record's output is still visible while the key hangs (the set rides
    in a side record that the metadata links)."""
    done = _run(
        "stuck_key.py",
        kafka_bootstrap,
        "--records",
        "80000",
        "--exactly-once",
        "--topic",
        unique_name("ex-stuck-eos"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip().splitlines()[-1]
    assert "80000/80000 outputs visible (read_committed)" in line, line
    assert "side record linked: yes" in line, line


def test_mixed_partitioners_are_found_and_explained(kafka_bootstrap: str) -> None:
    """Issue 25 part 8: keys split by a CRC32 and a murmur2 producer are counted and logged."""
    done = _run("mixed_partitioners.py", kafka_bootstrap, "--topic", unique_name("ex-mixed"))
    assert done.returncode == 0, done.stderr[-3000:]
    line = done.stdout.strip().splitlines()[-1]
    split, total, found = map(int, re.findall(r"(\d+) of (\d+) keys.*found (\d+)", line)[0])
    assert total == 1000 and split > 700 and 0 < found <= split, line
    warnings = [w for w in done.stderr.splitlines() if "arrived in partitions" in w]
    assert len(warnings) == 1 and "partitioner=murmur2_random" in warnings[0], done.stderr[-2000:]
