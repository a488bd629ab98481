"""``keyshared demo`` end to end on the session's broker, and its order verifier on its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from keyshared.demo.verifier import OrderVerifier


@pytest.mark.parametrize("mode", ["partition", "key_shared", "exclusive", "partition_leases"])
def test_demo_small_run_proves_order_and_completeness(
    kafka_bootstrap: str, zookeeper_hosts: str, mode: str
) -> None:
    """key_shared runs more members (3) than partitions (1): the coordinator splits the keys.
    exclusive runs one active member and a standby, without poison (its policy blocks a key)."""
    zk = ["--zookeeper", zookeeper_hosts]
    shape = {
        "partition": ["--partitions", "3", "--members", "2"],
        "key_shared": ["--partitions", "1", "--members", "3", "--mode", "key_shared", *zk],
        "exclusive": ["--partitions", "3", "--members", "2", "--mode", "exclusive", *zk],
        "partition_leases": ["--partitions", "3", "--members", "2", "--partition-leases", *zk],
    }[mode]
    command = [
        sys.executable,
        "-c",
        "from keyshared.cli import main; main()",
        "demo",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--records",
        "1500",
        "--keys",
        "60",
        *shape,
        "--workers",
        "8",
        "--handler-ms",
        "1",
        "--poison-every",
        "500",
        "--metrics-port",
        "0",
    ]
    done = subprocess.run(
        command,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-4000:]
    assert "1,500 orders" in out
    assert "✓ 0 violations" in out
    assert "✓ 0 (every produced order succeeded or is in the DLQ)" in out
    assert "every partition committed to its end offset" in out
    # The plain-consumer estimate uses the configured handler time, not a loaded machine's.
    assert "at the configured 1 ms per call" in out
    # librdkafka's own lines (e.g. "%6|...|GETPID|...| Coordinator load in progress") stay off
    # the screen: they go through Python logging at ERROR.
    raw = [line for line in (out + done.stderr).splitlines() if line.startswith("%")]
    assert not raw, raw
    if mode == "key_shared":
        assert "(1 partition)" in out and "(1 partitions)" not in out
        assert f"--zookeeper {zookeeper_hosts}" in out and "H:P" not in out
    if mode == "exclusive":
        assert "1 active member of 2" in out
        assert "0 in keyshared-demo-" in out and "(expected 0)" in out
        return
    assert "3 in keyshared-demo-" in out and "(expected 3)" in out
    assert "keyshared.source.offset" in out  # the headers of one dead letter are shown


def test_verifier_accepts_order_and_retries() -> None:
    v = OrderVerifier()
    for seq in range(3):
        v.started("a", seq, attempt=1)
        v.finished("a", seq, ok=seq != 1)
        if seq == 1:  # a retry of the failed order is not a violation
            v.started("a", 1, attempt=2)
            v.finished("a", 1, ok=True)
    verdict = v.verdict()
    assert verdict.violations == 0 and verdict.duplicates == 0
    assert verdict.succeeded == {"a": {0, 1, 2}}


def test_verifier_flags_overlap_skips_and_duplicates() -> None:
    v = OrderVerifier()
    v.started("a", 0, attempt=1)
    v.started("a", 1, attempt=1)  # while 0 still runs
    v.finished("a", 1, ok=True)
    v.started("a", 3, attempt=1)  # skips 2
    v.finished("a", 3, ok=True)
    v.started("b", 0, attempt=1)
    v.finished("b", 0, ok=True)
    v.started("b", 0, attempt=1)  # redelivered after success
    v.finished("b", 0, ok=True)
    verdict = v.verdict()
    assert verdict.violations == 2
    assert verdict.duplicates == 1
    assert any("order 3 started after order 1" in e for e in verdict.examples)


def test_an_unfinished_order_redelivered_after_a_hand_over_is_not_a_violation() -> None:
    """Found by the README's demo run: a poison order waiting for its retry when its partition
    moved was started again from attempt 1 by the new owner. Nothing ran out of order."""
    v = OrderVerifier()
    v.started("a", 0, attempt=1)
    v.finished("a", 0, ok=True)
    v.started("a", 1, attempt=1)
    v.finished("a", 1, ok=False)  # waits for its retry; the partition moves
    v.started("a", 1, attempt=1)  # the new owner redelivers it
    v.finished("a", 1, ok=True)
    v.started("a", 1, attempt=1)  # again after it succeeded: a duplicate
    v.finished("a", 1, ok=True)
    v.started("a", 3, attempt=1)  # skips 2: still a violation
    verdict = v.verdict()
    assert verdict.redelivered == 1
    assert verdict.duplicates == 1
    assert verdict.violations == 1 and "order 3 started after order 1" in verdict.examples[0]
