"""What a scenario measured: labelled measurements, the ratios between them, and notes.

Why ratios and not absolute numbers: on a shared two-core machine absolute rates swing with the
neighbours' load, but two runs measured minutes apart on the same broker move together, so the
ratio to a baseline measured in the same run is the figure worth quoting and comparing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Measurement", "ScenarioResult"]


@dataclass
class Measurement:
    """One measured (or computed) contender of a scenario.

    :param label: what was measured, e.g. ``"keyshared (64 workers)"``.
    :param records: records handled in the timed window.
    :param seconds: the timed window: first handler start to last handler finish, so group
        joins and start-up are excluded for every contender alike.
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

    @property
    def figure(self) -> float:
        """The number charts and tables show: ``value`` if set, else the rate."""
        if self.value is not None:
            return self.value
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["figure"] = round(self.figure, 3)
        return data


@dataclass
class ScenarioResult:
    """Everything one scenario reports; ``ratios`` are contender / baseline, same run."""

    scenario: str
    description: str
    params: dict[str, Any]
    measurements: list[Measurement] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    elapsed_seconds: float = 0.0

    def add(self, measurement: Measurement) -> Measurement:
        self.measurements.append(measurement)
        return measurement

    def ratio(self, name: str, numerator: float, denominator: float) -> float:
        """Record ``numerator / denominator`` under ``name`` (0 when the baseline is 0)."""
        value = numerator / denominator if denominator > 0 else 0.0
        self.ratios[name] = round(value, 4)
        return value

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "description": self.description,
            "params": self.params,
            "measurements": [m.to_json() for m in self.measurements],
            "ratios": self.ratios,
            "notes": self.notes,
            "elapsed_seconds": round(self.elapsed_seconds, 2),
        }
