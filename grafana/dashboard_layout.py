"""Grafana's JSON shape of a row and a panel, and where each goes on the 24-column grid.

Panels are declared in reading order (see dashboard_panels.py); ``Layout`` fills each line left
to right and starts the next when a panel would not fit, so no panel carries coordinates.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DS", "Json", "Layout", "Target"]

DS = {"type": "prometheus", "uid": "${datasource}"}

Json = dict[str, Any]
Target = tuple[str, str]  # (expr, legend)


class Layout:
    """Places panels left to right in a 24-column grid, starting a new line when full."""

    def __init__(self) -> None:
        self.panels: list[Json] = []
        self.x = 0
        self.y = 0
        self.height = 0

    def row(self, title: str) -> None:
        self.y += self.height
        self.x, self.height = 0, 0
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "id": len(self.panels) + 1,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                "panels": [],
            }
        )
        self.y += 1

    def panel(
        self,
        title: str,
        description: str,
        targets: list[Target],
        *,
        unit: str = "short",
        width: int = 8,
        kind: str = "timeseries",
        thresholds: list[tuple[str, float | None]] | None = None,
    ) -> None:
        if self.x + width > 24:
            self.y += self.height
            self.x, self.height = 0, 0
        steps = thresholds or [("green", None)]
        self.panels.append(
            {
                "type": kind,
                "title": title,
                "description": description,
                "id": len(self.panels) + 1,
                "datasource": DS,
                "gridPos": {"h": 8, "w": width, "x": self.x, "y": self.y},
                "fieldConfig": {
                    "defaults": {
                        "unit": unit,
                        "thresholds": {
                            "mode": "absolute",
                            "steps": [{"color": c, "value": v} for c, v in steps],
                        },
                    },
                    "overrides": [],
                },
                "options": {
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"},
                },
                "targets": [
                    {"refId": chr(ord("A") + i), "datasource": DS, "expr": e, "legendFormat": lg}
                    for i, (e, lg) in enumerate(targets)
                ],
            }
        )
        self.x += width
        self.height = max(self.height, 8)
