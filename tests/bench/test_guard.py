"""``keyshared bench --guard`` on the test session's broker: it must pass, in about 90 s at most.

The guard compares keyshared's steady-state rate with a thread pool's measured in the same run
(ratios only, never a time; see keyshared/bench/guard.py), so it is meant to run in CI on any
machine. Failing here means keyshared fell well below today's ratio (a floor at 0.6 x the pool
for io, 0.4 x for noop, 0.5 x for batch), after one re-measure: look at the printed comparison
before suspecting the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

GUARD_BUDGET_S = 90.0


@pytest.mark.timeout(GUARD_BUDGET_S + 30)
def test_guard_passes_against_the_test_broker(kafka_bootstrap: str, tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-c",
        "from keyshared.cli import main; main()",
        "bench",
        "--guard",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--out",
        str(tmp_path),
    ]
    began = time.monotonic()
    done = subprocess.run(
        command,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=GUARD_BUDGET_S,
        check=False,
    )
    seconds = time.monotonic() - began
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "guard.json").read_text())
    assert report["passed"] is True
    assert {check["name"] for check in report["checks"]} == {"io", "depth", "noop", "batch"}
    for check in report["checks"]:
        assert check["ratio"] >= check["floor"] > 0  # the steady-state ratio is the guarded one
        assert check["whole_run_ratio"] > 0
        for side in ("keyshared", "baseline"):
            assert check[side]["records"] > 0 and check[side]["steady_figure"] > 0
    assert "ratio" in done.stdout and "floor" in done.stdout  # says what it compared
    assert "steady state" in done.stdout and "whole run" in done.stdout
    assert seconds < GUARD_BUDGET_S


def test_guard_refuses_a_scenario_name() -> None:
    from click.testing import CliRunner

    from keyshared.cli.bench import bench

    result = CliRunner().invoke(bench, ["--guard", "io"])
    assert result.exit_code == 2
    assert "--guard" in result.output
