"""``examples/spark_replay.py`` runs as a user runs it (one command) and keeps the order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_replay.py"


def test_the_spark_replay_example_restores_the_parked_accounts_order(kafka_bootstrap: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--master", "local[2]"],
        env={**os.environ, "KEYSHARED_BOOTSTRAP_SERVERS": kafka_bootstrap, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "parked account-3 at payment 3: 4 payments" in done.stdout
    assert "replayed 4 payments with Spark" in done.stdout
    assert "account-3 payments applied: [1, 2, 3, 4, 5, 6] -> in order" in done.stdout
