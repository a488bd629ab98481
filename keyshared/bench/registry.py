"""The scenario registry: one module per scenario registers itself under a name.

Why a registry rather than a hard-coded list: scenarios arrive with the features they measure
(``scaleout`` comes with the coordinator), and each should be one new module that calls
:func:`register`, with no edit to the CLI.

Example::

    @register("io", "1 partition, 10k keys, 5 ms handler: keyshared vs serial vs thread pool")
    def run_io(ctx: BenchContext) -> ScenarioResult: ...
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from keyshared.bench.context import BenchContext
    from keyshared.bench.result import ScenarioResult

__all__ = ["SCENARIOS", "Scenario", "load_scenarios", "register"]

ScenarioFn = Callable[["BenchContext"], "ScenarioResult"]


@dataclass(frozen=True)
class Scenario:
    """A registered scenario; ``in_full_run``: part of ``keyshared bench`` with no scenario
    named (False: it runs only when named, being too long for the full run and its CI smoke)."""

    name: str
    summary: str
    run: ScenarioFn
    in_full_run: bool = True


SCENARIOS: dict[str, Scenario] = {}

# The modules that register the built-in scenarios, in the order a full run executes them.
_BUILTIN = (
    "noop",
    "batch",
    "io",
    "io_work",
    "async_io",
    "zipf",
    "memory",
    "stuck",
    "rebalance",
    "scaleout",
    "replay",
    "eos",
    "sweep",  # only when named (in_full_run=False): many minutes even at --quick
)


def register(
    name: str, summary: str, *, in_full_run: bool = True
) -> Callable[[ScenarioFn], ScenarioFn]:
    """Class the decorated function as scenario ``name``; a second registration is an error.
    ``in_full_run=False``: the scenario runs only when named on the command line."""

    def decorate(fn: ScenarioFn) -> ScenarioFn:
        if name in SCENARIOS:
            raise ValueError(f"benchmark scenario {name!r} is registered twice")
        SCENARIOS[name] = Scenario(name, summary, fn, in_full_run)
        return fn

    return decorate


def load_scenarios() -> dict[str, Scenario]:
    """Import the built-in scenario modules (idempotent) and return the registry."""
    for module in _BUILTIN:
        importlib.import_module(f"keyshared.bench.scenarios.{module}")
    return SCENARIOS
