"""24 real ``keyshared run`` members in key_shared mode on a 4-partition topic, 400 records/s
over 2,000 keys with a 5 ms handler, through a rolling restart of every member and through a
SIGKILL every 5 s for 5 minutes (:mod:`tests.chaos.real_members`).

Run by hand only (``--scale-real``; 8-20 minutes each, CPU-bound on this machine): the
guarantees are asserted (nothing lost, no per-key overtake); the speed figures (throughput
and latency during the disruption, hand-over waits) are printed for docs/scaling.md, not
asserted. ``--scale-real-source DIR`` runs another tree's members under the same harness.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.real_members import DISRUPTIONS, RealRun, run_real_members

pytestmark = [pytest.mark.scale_real, pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.mark.parametrize("disruption", DISRUPTIONS)
def test_real_members(
    disruption: str,
    request: pytest.FixtureRequest,
    kafka_bootstrap: str,
    zookeeper_hosts: str,
    tmp_path: Path,
) -> None:
    config = request.config
    source = config.getoption("--scale-real-source")
    run = RealRun(
        disruption,
        members=config.getoption("--scale-real-members"),
        kill_for_s=config.getoption("--scale-real-kill-seconds"),
        source=Path(source).resolve() if source else None,
    )
    print(f"\n  member logs and journal: {tmp_path}")
    result = run_real_members(run, kafka_bootstrap, zookeeper_hosts, tmp_path)
    print(result.report())
    assert result.lost == 0, f"{result.lost} records lost: {result.judged.lost[:5]}"
    assert not result.overtakes, f"per-key overtakes: {result.overtakes[:5]}"
