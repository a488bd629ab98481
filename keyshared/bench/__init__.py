"""``keyshared bench``: scenarios against the real broker, each with in-run baselines.

A scenario is a function registered under a name (:func:`register`) that takes a
:class:`BenchContext` and returns a :class:`ScenarioResult` whose ratios compare keyshared with
baselines measured in the same run (or computed bounds). See ``docs/benchmarks.md``.
"""

from __future__ import annotations

from keyshared.bench.context import BenchContext
from keyshared.bench.registry import SCENARIOS, Scenario, load_scenarios, register
from keyshared.bench.result import Measurement, ScenarioResult

__all__ = [
    "SCENARIOS",
    "BenchContext",
    "Measurement",
    "Scenario",
    "ScenarioResult",
    "load_scenarios",
    "register",
]
