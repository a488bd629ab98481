"""keyshared against a bare ``consume(1000)`` loop, the ceiling of reading a topic.

The ``noop`` and ``batch`` scenarios both measure it the same way: several raw runs and
several keyshared runs, alternated so that the machine's drift hits both alike, each side
judged by its best run. One place for that method, so that the two ratios stay comparable.
"""

from __future__ import annotations

from collections.abc import Callable

from keyshared.bench.contenders import run_raw
from keyshared.bench.context import BenchContext
from keyshared.bench.result import Measurement

__all__ = ["Alternated", "alternate_with_raw"]


class Alternated:
    """The runs of both sides; :attr:`raw` and :attr:`other` are each side's best."""

    def __init__(self, raws: list[Measurement], others: list[Measurement]) -> None:
        self.raws, self.others = raws, others
        self.raw, self.other = _best(raws), _best(others)

    def note(self, other_name: str) -> str:
        """Every run's rate, for the result's notes."""
        return (
            f"best of {len(self.raws)} raw runs ({_rates(self.raws)} records/s) and of "
            f"{len(self.others)} {other_name} runs ({_rates(self.others)} records/s)"
        )


def alternate_with_raw(
    ctx: BenchContext,
    scenario: str,
    topic: str,
    records: int,
    runs: tuple[int, int],
    other: Callable[[int], Measurement],
) -> Alternated:
    """``runs[0]`` raw runs and ``runs[1]`` runs of ``other`` (given the run's number),
    alternated."""
    raws: list[Measurement] = []
    others: list[Measurement] = []
    for run in range(max(runs)):
        if run < runs[0]:
            ctx.say(f"{scenario}: {records} records on {topic}; raw consume loop, run {run + 1}")
            raws.append(run_raw(ctx.bootstrap, topic, ctx.new_group(f"{scenario}-raw"), records))
        if run < runs[1]:
            others.append(other(run))
    return Alternated(raws, others)


def _best(runs: list[Measurement]) -> Measurement:
    best = max(runs, key=lambda m: m.figure)
    best.extra["runs"] = [round(m.figure) for m in runs]
    return best


def _rates(runs: list[Measurement]) -> str:
    return ", ".join(f"{m.figure:,.0f}" for m in runs)
