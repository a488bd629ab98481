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

# The module-scoped `bench --quick` run (about 160 s here since issue 23 added the io shapes
# and `stuck`) is set up inside the first test: give it the subprocess's own bound, not the
# suite's 300 s default.
pytestmark = pytest.mark.timeout(900)

EXPECTED_RATIOS = {
    "io": {
        "worst_keyshared_vs_bound",
        "worst_keyshared_vs_bound_steady",
        "worst_keyshared_cli_vs_bound",
        "worst_keyshared_cli_vs_bound_steady",
    },
    "io_work": {"worst_keyshared_vs_bound", "worst_keyshared_cli_vs_bound"},
    "async_io": {"keyshared_vs_bound"},
    "noop": {"keyshared_vs_raw"},
    "batch": {"batch_noop_vs_raw", "batch_noop_vs_single_record", "sqlite_batch_vs_per_record"},
    "zipf": {"keyshared_vs_hot_key_bound", "keyshared_vs_serial"},
    "memory": {"keyshared_vs_raw_bytes_per_entry"},
    "rebalance": {"keyshared_vs_plain_join_to_steady", "keyshared_vs_plain_leave_to_takeover"},
    "scaleout": {"4_members_vs_1", "2_members_vs_1"},
    "replay": {"spark_vs_python_loop"},
    "eos": {"eos_vs_at_least_once", "eos_short_interval_vs_at_least_once"},
    "stuck": set(),  # figures with goals, not ratios: see EXPECTED_GOALS
}
# Shaped scenarios: every shape (4, 8, 32 per key, Zipf) reports these ratios, each both ways
# (steady state and whole run); the headline shape (8) also the once-only contenders.
SHAPE_RATIOS = {
    name + suffix
    for name in (
        "keyshared_vs_bound",
        "keyshared_cli_vs_bound",
        "keyshared_vs_thread_pool",
        "thread_pool_vs_bound",
    )
    for suffix in ("", "_steady")
}
HEADLINE_RATIOS = {"io": {"keyshared_vs_serial", "ring_balance"}, "io_work": set()}
EXPECTED_GOALS = {
    "batch": {"batch_noop_vs_raw", "sqlite_batch_vs_per_record"},
    "stuck": {"finished_during_stall_fraction", "rss_growth_mib", "redo_fraction_after_kill"},
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
        # The peers' JVM and process start-ups cost CI 30-40 s here and nothing below asserts
        # a peer's figure: tests/bench/test_bench_peers.py races each peer on the broker.
        "--no-parallel-consumer",
        "--no-pyrallel",
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
    # sweep runs only when named (minutes even at --quick): tests/bench/test_sweep.py
    in_full_run = {name for name, s in load_scenarios().items() if s.in_full_run}
    assert in_full_run == set(EXPECTED_RATIOS)


@pytest.mark.parametrize("scenario", sorted(EXPECTED_RATIOS))
def test_scenario_reports_positive_ratios_json_and_chart(
    quick_results: tuple[Path, Any], scenario: str
) -> None:
    out, results = quick_results
    assert {"platform", "cpus", "librdkafka"} <= set(results["machine"])
    data = results["scenarios"][scenario]
    assert {"description", "params", "measurements", "ratios", "notes"} <= set(data)
    assert EXPECTED_RATIOS[scenario] <= set(data["ratios"])
    if scenario in HEADLINE_RATIOS:
        assert set(data["shapes"]) == {"4", "8", "32", "zipf"}
        for shape, nested in data["shapes"].items():
            wanted = SHAPE_RATIOS | (HEADLINE_RATIOS[scenario] if shape == "8" else set())
            assert wanted <= set(nested["ratios"]), shape
            _check_figures(f"{scenario}/{shape}", nested)
    else:
        assert data["measurements"]
    _check_figures(scenario, data)
    for name in EXPECTED_GOALS.get(scenario, ()):
        goal = data["goals"][name]
        assert goal["value"] >= 0 and isinstance(goal["met"], bool), name
    assert (out / f"{scenario}.png").stat().st_size > 1000


def _check_figures(scenario: str, data: Any) -> None:
    """Rates positive; counts (overlaps, records run again) may be 0, never negative."""
    for m in data["measurements"]:
        assert m["figure"] > 0 or m["unit"] in ("s", "records"), f"{scenario}: {m}"
        assert m["figure"] >= 0, f"{scenario}: {m}"
        assert m["steady_figure"] is None or m["steady_figure"] > 0, f"{scenario}: {m}"
    for name, value in data["ratios"].items():
        if name in COUNTS:
            assert value == 0, f"{scenario}: {name} = {value}"
        elif name != "keyshared_overhead_bytes_per_entry":
            assert value > 0, f"{scenario}: {name} = {value}"
