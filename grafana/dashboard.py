"""Generate ``grafana/dashboards/keyshared.json`` — run ``python grafana/dashboard.py``.

Why code rather than hand-kept JSON: every query repeats the same label filters and the same
``rate(...[$__rate_interval])`` shape, and a 30-panel JSON file hides a typo in one of them. Here
the filters are written once and panels are a line or three each. Why no dashboards-as-code
library (grafanalib, grafana-foundation-sdk): the dashboard is plain JSON anyway, and a stdlib
script keeps it regenerable without a dependency. The JSON is checked in, so Grafana users never
run this; ``tests/ops/test_dashboard_queries.py`` fails if the file and this script disagree.

This module assembles the dashboard (its variables and settings) and is the command line; the
panels are in dashboard_panels.py, their grid and JSON shape in dashboard_layout.py and the
PromQL helpers in dashboard_promql.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Run as a script, this folder is on sys.path already; loaded by file path (as tests/ops does)
# it is not, so the sibling modules below are made importable the same way.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)

from dashboard_layout import DS, Json  # noqa: E402
from dashboard_panels import panels  # noqa: E402

__all__ = ["OUTPUT", "build", "main", "render"]

OUTPUT = Path(__file__).with_name("dashboards") / "keyshared.json"


def variable(name: str, query: str) -> Json:
    """A multi-select template variable filled from label values, "All" by default."""
    return {
        "name": name,
        "label": name,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def build() -> Json:
    """The whole dashboard as a JSON-able dict."""
    return {
        "uid": "keyshared",
        "title": "keyshared",
        "description": "Per-key parallel Kafka consumers: flow, backlog, failures, coordination.",
        "tags": ["keyshared", "kafka"],
        "timezone": "browser",
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {"text": "Prometheus", "value": "prometheus"},
                },
                variable("group", "label_values(keyshared_records_received_total, group)"),
                variable(
                    "topic",
                    'label_values(keyshared_records_received_total{group=~"$group"}, topic)',
                ),
            ]
        },
        "panels": panels(),
    }


def render() -> str:
    """The dashboard file's exact text (the checked-in JSON must equal it byte for byte)."""
    return json.dumps(build(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    """Write the dashboard, or with ``--check`` exit 1 if the checked-in file is stale."""
    text = render()
    if "--check" in argv:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is stale: run python grafana/dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
