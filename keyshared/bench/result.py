"""What a scenario measured: labelled measurements, the ratios between them, and notes.

Why ratios and not absolute numbers: on a shared two-core machine absolute rates swing with the
neighbours' load, but two runs measured minutes apart on the same broker move together, so the
ratio to a baseline measured in the same run is the figure worth quoting and comparing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from keyshared.bench.steady import steady_state

__all__ = ["STEADY_SUFFIX", "Goal", "Measurement", "ScenarioResult", "steady_name", "timed"]


@dataclass
class Measurement:
    """One measured (or computed) contender of a scenario.

    :param label: what was measured, e.g. ``"keyshared (64 workers)"``.
    :param records: records handled in the timed window.
    :param seconds: the timed window: first handler start to last handler finish, so group
        joins and start-up are excluded for every contender alike. ``records / seconds`` is
        the *whole-run* rate, what a backfill waits for.
    :param steady_records: records finished inside the *steady-state* window, the middle 90 %
        of completions (:mod:`keyshared.bench.steady`); 0 when the contender reported no
        completion marks.
    :param steady_seconds: that window's span; the steady-state rate is what a long-running
        consumer lives at, once started and before the tail.
    :param kind: ``"measured"`` or ``"bound"`` (a computed physical limit, not a run).
    :param value: the scenario's own figure when it is not a rate (bytes, seconds).
    :param unit: the unit of ``value`` (``"records/s"`` when it is a rate).
    """

    label: str
    records: int = 0
    seconds: float = 0.0
    kind: str = "measured"
    value: float | None = None
    unit: str = "records/s"
    extra: dict[str, Any] = field(default_factory=dict)
    steady_records: int = 0
    steady_seconds: float = 0.0

    @property
    def figure(self) -> float:
        """The whole-run figure: ``value`` if set, else the rate first start to last finish."""
        if self.value is not None:
            return self.value
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def steady_figure(self) -> float | None:
        """The steady-state rate; a bound's own figure (a limit holds at every instant); None
        when the contender reported no marks, or the figure is not a rate."""
        if self.steady_seconds > 0:
            return self.steady_records / self.steady_seconds
        if self.kind == "bound" and self.unit == "records/s":
            return self.figure
        return None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["figure"] = round(self.figure, 3)
        steady = self.steady_figure
        data["steady_figure"] = None if steady is None else round(steady, 3)
        return data


def timed(
    label: str,
    records: int,
    seconds: float,
    marks: Sequence[float],
    every: int,
    **extra: Any,
) -> Measurement:
    """A rate measurement with both figures: whole-run from ``records`` and ``seconds``,
    steady-state from the completion ``marks`` (seconds since the first handler start, one per
    ``every`` completions; see :func:`~keyshared.bench.steady.steady_state`). Where the steady
    window opens and closes goes into ``extra`` (``steady_window_s``): the start-up and the tail
    the steady figure leaves out."""
    measurement = Measurement(label, records, seconds, extra=dict(extra))
    steady = steady_state(marks, every) if marks else None
    if steady is not None:
        measurement.steady_records = steady.records
        measurement.steady_seconds = steady.seconds
        measurement.extra["steady_window_s"] = [round(steady.start, 4), round(steady.end, 4)]
    return measurement


STEADY_SUFFIX = "_steady"


def steady_name(ratio: str) -> str:
    """The name of a ratio's steady-state twin (the plain name is the whole-run ratio)."""
    return ratio + STEADY_SUFFIX


@dataclass(frozen=True)
class Goal:
    """A figure with the goal it is held to: ``value`` must be ``at_least`` or ``at_most`` the
    ``target``. Reported, never asserted: whether a goal is met is the result, not a failure.
    """

    value: float
    target: float
    at_least: bool
    unit: str = ""

    @property
    def met(self) -> bool:
        return self.value >= self.target if self.at_least else self.value <= self.target

    def to_json(self) -> dict[str, Any]:
        return {
            "value": round(self.value, 4),
            "goal": f"{'>=' if self.at_least else '<='} {self.target:g}",
            "unit": self.unit,
            "met": self.met,
        }


@dataclass
class ScenarioResult:
    """Everything one scenario reports; ``ratios`` are contender / baseline, same run.

    A scenario that runs several workload *shapes* (the ``io`` scenarios: 4, 8, 32 records per
    key, Zipf) keeps one nested result per shape in ``shapes``, each with its own measurements
    and ratios, because a ratio only means something against contenders measured on the same
    topic. The top level then holds what spans the shapes (the worst shape's ratio).
    """

    scenario: str
    description: str
    params: dict[str, Any]
    measurements: list[Measurement] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    elapsed_seconds: float = 0.0
    shapes: dict[str, ScenarioResult] = field(default_factory=dict)
    goals: dict[str, Goal] = field(default_factory=dict)

    def add(self, measurement: Measurement) -> Measurement:
        self.measurements.append(measurement)
        return measurement

    def ratio(self, name: str, numerator: float, denominator: float) -> float:
        """Record ``numerator / denominator`` under ``name`` (0 when the baseline is 0)."""
        value = numerator / denominator if denominator > 0 else 0.0
        self.ratios[name] = round(value, 4)
        return value

    def ratios_both(self, name: str, numerator: Measurement, denominator: Measurement) -> float:
        """Record the ratio of two measurements both ways: steady state under
        ``<name>_steady`` (first, when both have it), whole run under ``name``; returns the
        whole-run one."""
        top, bottom = numerator.steady_figure, denominator.steady_figure
        if top is not None and bottom is not None:
            self.ratio(steady_name(name), top, bottom)
        return self.ratio(name, numerator.figure, denominator.figure)

    def goal(
        self, name: str, value: float, target: float, *, at_least: bool, unit: str = ""
    ) -> Goal:
        """Record figure ``name`` with its goal (``>= target`` or ``<= target``)."""
        goal = Goal(value, target, at_least, unit)
        self.goals[name] = goal
        return goal

    def shape(self, name: str, description: str, params: dict[str, Any]) -> ScenarioResult:
        """A fresh nested result for workload shape ``name`` (see the class docstring)."""
        nested = ScenarioResult(f"{self.scenario}/{name}", description, params)
        self.shapes[name] = nested
        return nested

    def shape_ratios(self, name: str) -> dict[str, float]:
        """Ratio ``name`` of every shape that has it, in run order."""
        return {shape: r.ratios[name] for shape, r in self.shapes.items() if name in r.ratios}

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "scenario": self.scenario,
            "description": self.description,
            "params": self.params,
            "measurements": [m.to_json() for m in self.measurements],
            "ratios": self.ratios,
            "notes": self.notes,
            "elapsed_seconds": round(self.elapsed_seconds, 2),
        }
        if self.goals:
            data["goals"] = {name: goal.to_json() for name, goal in self.goals.items()}
        if self.shapes:
            data["shapes"] = {name: nested.to_json() for name, nested in self.shapes.items()}
        return data
