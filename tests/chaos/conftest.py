"""Options of the chaos runs.

The short runs of every mode (about a minute each), and of every mode on the production
topology (``test_chaos_topology``: 1.5-3.5 minutes each here), are part of the default run and
of CI; ``--chaos`` gives the topology runs every node fault in every mode. A mode with open
findings (marker ``chaos_open``; none at present: partition leases' finding 17 is fixed) runs
only with ``--chaos`` (or ``KS_CHAOS=1``), which selects every mode; so do the runs kept out of
CI for time (marker ``chaos_by_hand``: the exactly-once runs but one).
``--no-chaos`` (or ``KS_CHAOS=0``) leaves all of them out of a quick run.

``--chaos-minutes N`` (or ``KS_CHAOS_MINUTES=N``; ``KS_CHAOS_LONG=1`` means 30) turns every
chaos test of the session into a long run: an N-minute fault phase at the same fault rates,
and records produced in proportion. See ``docs/chaos.md``.
"""

from __future__ import annotations

import os

import pytest

from tests.chaos.plan import GROUP_PROTOCOLS

LONG_DEFAULT_MINUTES = 30.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--chaos",
        action="store_true",
        default=False,
        help="run every chaos mode, those with open findings too (marker chaos_open). "
        "Also KS_CHAOS=1.",
    )
    parser.addoption(
        "--no-chaos",
        action="store_true",
        default=False,
        help="leave the chaos runs (tests/chaos/test_chaos.py, ~4 min, and ~5 more on the "
        "topology) out. Also KS_CHAOS=0.",
    )
    parser.addoption(
        "--chaos-minutes",
        type=float,
        default=None,
        help="chaos tests: length of the fault phase in minutes (a long run; default: the "
        "short CI run). Also KS_CHAOS_MINUTES=N, or KS_CHAOS_LONG=1 for 30 minutes.",
    )
    parser.addoption(
        "--chaos-rate",
        type=float,
        default=None,
        help="chaos tests, long runs: records produced per second (default: the short run's "
        "1,000/s; a 2-core machine running every member, the broker and ZooKeeper keeps up "
        "with about 400/s under a kill every 4-7 s). Also KS_CHAOS_RATE=N.",
    )
    parser.addoption(
        "--chaos-group-protocol",
        choices=GROUP_PROTOCOLS,
        default=None,
        help="chaos tests: the members' group.protocol (default classic; consumer is KIP-848, "
        "the broker assigns). Also KS_CHAOS_GROUP_PROTOCOL.",
    )


def chaos_group_protocol(config: pytest.Config) -> str | None:
    """The members' ``group.protocol`` if asked for (default: each plan's, ``classic``)."""
    protocol: str | None = config.getoption("--chaos-group-protocol")
    return protocol or os.environ.get("KS_CHAOS_GROUP_PROTOCOL") or None


def chaos_rate(config: pytest.Config) -> float | None:
    """Records per second of a long run (default: the short run's rate)."""
    rate = config.getoption("--chaos-rate")
    if rate is None and os.environ.get("KS_CHAOS_RATE"):
        rate = float(os.environ["KS_CHAOS_RATE"])
    return rate


def chaos_minutes(config: pytest.Config) -> float | None:
    """The long run's fault phase in minutes, or None for the short run."""
    minutes = config.getoption("--chaos-minutes")
    if minutes is None and os.environ.get("KS_CHAOS_MINUTES"):
        minutes = float(os.environ["KS_CHAOS_MINUTES"])
    if minutes is None and os.environ.get("KS_CHAOS_LONG", "") not in ("", "0"):
        minutes = LONG_DEFAULT_MINUTES
    return minutes


def chaos_selected(config: pytest.Config) -> bool:
    """Whether this session runs the chaos tests (yes, unless asked not to)."""
    if chaos_minutes(config) is not None or all_chaos(config):
        return True
    return not config.getoption("--no-chaos") and os.environ.get("KS_CHAOS", "") != "0"


def all_chaos(config: pytest.Config) -> bool:
    """Whether the modes with open findings run too."""
    return (
        bool(config.getoption("--chaos"))
        or os.environ.get("KS_CHAOS", "") not in ("", "0")
        or chaos_minutes(config) is not None
    )


FULL_PLAN_TIMEOUT_S = 1200
"""A ``--chaos`` run's bound. The full topology plans hold the input back for 75 s (offset
expiry), wait for a topic's recreation and restart every broker in turn (71 s on a loaded
machine): the key_shared run of 2026-11-29 was still settling, 19,979 of 20,000 records
finished, when the suite's 300 s ran out."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the chaos runs out when asked to (deselected, not skipped); a long run
    outlives the suite's 300 s timeout: give chaos tests their own bound."""
    chaos = [item for item in items if item.get_closest_marker("chaos") is not None]
    if not chaos_selected(config):
        left_out = chaos
    elif not all_chaos(config):
        left_out = [
            item
            for item in chaos
            if item.get_closest_marker("chaos_open") is not None
            or item.get_closest_marker("chaos_by_hand") is not None
        ]
    else:
        left_out = []
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in left_out]
    if not chaos_selected(config):
        return
    minutes = chaos_minutes(config)
    if minutes is None:
        if all_chaos(config):
            for item in chaos:
                item.add_marker(pytest.mark.timeout(FULL_PLAN_TIMEOUT_S))
        return
    for item in chaos:
        item.add_marker(pytest.mark.timeout(int(minutes * 60 + 1800)))
