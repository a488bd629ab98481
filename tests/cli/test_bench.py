"""``keyshared bench --quick``: every scenario runs on the real broker and reports its ratios.

Only the shape and sign of the results are asserted, never a speed: on a shared machine timed
assertions would be flaky. The numbers themselves are in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from keyshared.bench import load_scenarios

EXPECTED_RATIOS = {
    "io": {"keyshared_vs_bound", "keyshared_vs_serial", "keyshared_vs_thread_pool", "ring_balance"},
    "io_work": {"keyshared_vs_bound", "keyshared_vs_thread_pool"},
    "async_io": {"keyshared_vs_bound"},
    "noop": {"keyshared_vs_raw"},
    "zipf": {"keyshared_vs_hot_key_bound", "keyshared_vs_serial"},
    "memory": {"keyshared_vs_raw_bytes_per_entry"},
    "rebalance": {"keyshared_vs_plain_join_to_steady", "keyshared_vs_plain_leave_to_takeover"},
    "scaleout": {"4_members_vs_1", "2_members_vs_1"},
    "replay": {"spark_vs_python_loop"},
}
COUNTS = {"keyshared_ownership_overlaps", "plain_ownership_overlaps"}  # must be 0, not > 0


@pytest.fixture(scope="module")
def quick_results(
    kafka_bootstrap: str, zookeeper_hosts: str, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    out = tmp_path_factory.mktemp("bench")
    command = [
        sys.executable,
        "-c",
        "from keyshared.cli import main; main()",
        "bench",
        "--quick",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--zookeeper",
        zookeeper_hosts,
        "--out",
        str(out),
    ]
    done = subprocess.run(
        command,
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, json.loads((out / "results.json").read_text())


def test_every_registered_scenario_has_expectations() -> None:
    assert set(load_scenarios()) == set(EXPECTED_RATIOS)


@pytest.mark.parametrize("scenario", sorted(EXPECTED_RATIOS))
def test_scenario_reports_positive_ratios_json_and_chart(
    quick_results: tuple[Path, Any], scenario: str
) -> None:
    out, results = quick_results
    assert {"platform", "cpus", "librdkafka"} <= set(results["machine"])
    data = results["scenarios"][scenario]
    assert {"description", "params", "measurements", "ratios", "notes"} <= set(data)
    assert data["measurements"] and all(
        m["figure"] > 0 or m["unit"] == "s" for m in data["measurements"]
    )
    assert EXPECTED_RATIOS[scenario] <= set(data["ratios"])
    for name, value in data["ratios"].items():
        if name in COUNTS:
            assert value == 0, f"{scenario}: {name} = {value}"
        elif name != "keyshared_overhead_bytes_per_entry":
            assert value > 0, f"{scenario}: {name} = {value}"
    assert (out / f"{scenario}.png").stat().st_size > 1000
