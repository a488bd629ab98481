"""Read the Grafana dashboard's queries and evaluate them the way Grafana would.

Grafana's time-series panels issue range queries over the dashboard's time range, so a panel is
"empty" when no returned series has a single non-NaN point (``histogram_quantile`` over a window
without observations yields NaN, which Grafana draws as nothing). That is the check here, not a
mere "the query returned something".
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.registry import CollectorRegistry

from .prometheus import Prometheus, PrometheusError

__all__ = [
    "DEFAULT_DASHBOARD",
    "DashboardReport",
    "PanelQuery",
    "check_dashboard",
    "dashboard_queries",
    "exported_names",
    "metric_names",
    "substitute",
]

DEFAULT_DASHBOARD = Path(__file__).parents[2] / "grafana" / "dashboards" / "keyshared.json"
_METRIC = re.compile(r"\bkeyshared_[a-zA-Z0-9_]+")
_LABEL_VALUES = re.compile(r"label_values\((?:(?P<match>.+),\s*)?(?P<label>\w+)\)")


@dataclass(frozen=True)
class PanelQuery:
    panel: str
    ref_id: str
    expr: str


def _walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _walk(panel.get("panels", []))  # collapsed rows nest their panels


def dashboard_queries(path: Path = DEFAULT_DASHBOARD) -> list[PanelQuery]:
    """Every target expression of every panel (rows included, hidden targets too)."""
    dashboard = json.loads(path.read_text())
    return [
        PanelQuery(p.get("title", "?"), t.get("refId", "?"), t["expr"])
        for p in _walk(dashboard["panels"])
        for t in p.get("targets", [])
        if t.get("expr")
    ]


def variable_queries(path: Path = DEFAULT_DASHBOARD) -> dict[str, str]:
    """The ``label_values(...)`` query of each query variable, by variable name."""
    dashboard = json.loads(path.read_text())
    out: dict[str, str] = {}
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]
            out[v["name"]] = q["query"] if isinstance(q, dict) else q
    return out


def _promql_regex_literal(value: str) -> str:
    # The variable is used as =~"$x": escape regex metacharacters, then backslashes for PromQL.
    return re.escape(value).replace("\\", "\\\\")


def substitute(
    expr: str,
    variables: dict[str, str],
    rate_interval: str = "5s",
    interval: str = "1s",
    range_: str = "5m",
) -> str:
    """Replace Grafana's variables the way it would for a single selected value."""
    expr = expr.replace("$__rate_interval", rate_interval).replace("$__interval", interval)
    expr = expr.replace("$__range", range_)
    for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
        literal = _promql_regex_literal(value)
        expr = expr.replace(f"${{{name}}}", literal).replace(f"${name}", literal)
    return expr


def metric_names(expr: str) -> set[str]:
    """The ``keyshared_*`` series names a query reads."""
    return set(_METRIC.findall(expr))


def exported_names(registry: CollectorRegistry = REGISTRY) -> set[str]:
    """Every series name the registry can expose, including histogram and counter suffixes.

    Families without children still count: they are defined and will export once used.
    """
    import keyshared.metrics  # noqa: F401 - registers the families

    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("", "_sum", "_count", "_created"),
        "gauge": ("",),
        "stateset": ("",),
        "info": ("_info",),
    }
    names: set[str] = set()
    for family in registry.collect():
        for suffix in suffixes.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


@dataclass
class QueryResult:
    query: PanelQuery
    series: int = 0
    points: int = 0
    error: str = ""
    optional: bool = False

    @property
    def ok(self) -> bool:
        return not self.error and (self.points > 0 or self.optional)


@dataclass
class DashboardReport:
    results: list[QueryResult] = field(default_factory=list)
    unknown_metrics: dict[str, set[str]] = field(default_factory=dict)
    variable_errors: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[QueryResult]:
        return [r for r in self.results if not r.ok]

    @property
    def ok(self) -> bool:
        return not self.failures and not self.unknown_metrics and not self.variable_errors

    def table(self) -> str:
        lines = []
        for r in self.results:
            status = "ok" if r.ok and r.points else ("skip" if r.ok else "FAIL")
            detail = r.error or f"{r.series} series, {r.points} points"
            lines.append(f"{status:4} {r.query.panel} [{r.query.ref_id}]: {detail}")
            if status == "FAIL":
                lines.append(f"     {r.query.expr}")
        for panel, names in self.unknown_metrics.items():
            lines.append(f"FAIL {panel}: not exported by keyshared: {sorted(names)}")
        lines.extend(f"FAIL {e}" for e in self.variable_errors)
        return "\n".join(lines)


def check_dashboard(
    prom: Prometheus,
    path: Path,
    group: str,
    topic: str,
    start: float,
    *,
    optional: tuple[str, ...] = (),
    registry: CollectorRegistry = REGISTRY,
) -> DashboardReport:
    """Evaluate every panel query over ``[start, now]``; ``optional`` metric prefixes may be empty.

    Also checks that each variable's ``label_values`` offers ``group``/``topic`` and that no
    panel names a series keyshared does not export.
    """
    report = DashboardReport()
    end = time.time()
    variables = {"group": group, "topic": topic}
    exported = exported_names(registry)
    for query in dashboard_queries(path):
        unknown = metric_names(query.expr) - exported
        if unknown:
            report.unknown_metrics.setdefault(query.panel, set()).update(unknown)
        expr = substitute(query.expr, variables, range_=f"{max(1, int(end - start))}s")
        result = QueryResult(
            query, optional=any(n.startswith(optional) for n in metric_names(query.expr))
        )
        try:
            series = prom.query_range(expr, start, end, step=1.0)
        except PrometheusError as e:
            result.error = str(e)
        else:
            result.series = len(series)
            result.points = sum(
                1 for s in series for _, v in s["values"] if not math.isnan(float(v))
            )
        report.results.append(result)
    for name, var_query in variable_queries(path).items():
        m = _LABEL_VALUES.fullmatch(var_query.strip())
        if m is None:
            report.variable_errors.append(f"variable {name}: not a label_values query: {var_query}")
            continue
        params = {}
        if m["match"]:
            params["match[]"] = substitute(m["match"], {"group": group})
        values = prom.api(f"label/{m['label']}/values", **params)
        if variables.get(name) not in values:
            report.variable_errors.append(f"variable {name}: {values} lacks {variables.get(name)}")
    return report
