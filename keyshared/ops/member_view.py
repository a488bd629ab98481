"""What a running member says about itself: its ``/metrics``, ``/hotkeys`` and ``/readyz``.

Why ask a member at all: the broker knows where a group's cursor stands, not *why* it stands
there. Only the member knows how old its oldest unfinished record is (what holds the cursor
back), how much is in flight or waiting, which keys are busiest or slowest, and which holds on
dispatch are in place (each named by its owner, with its age: a hold nobody lifts is a member
that starts nothing), and what it holds in which phase (a lease handed back for minutes is a
member keeping the next owner waiting). A member that does not answer is reported, never
fatal: the broker-side status is still worth showing.

Example::

    view = fetch_member("http://10.0.0.7:9400/metrics", group="billing", timeout=5.0)
    view["partitions"]   # [{"topic": "orders", "partition": 0, "oldest_incomplete_age_seconds":
                         #   12.5, ..., "busiest": [...], "slowest_seconds": [...]}]
    view["ready"], view["holds"]   # False, {"zookeeper-liveness": 42.0}
    view["holdings"]   # [{"name": "0-32767", "phase": "active", "age": 812.3, "alive": True}]
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["base_url", "fetch_member", "parse_metrics"]

# Per-partition gauges worth showing next to the hot keys, by their name without the prefix.
_GAUGES = {
    "keyshared_partition_oldest_incomplete_age_seconds": "oldest_incomplete_age_seconds",
    "keyshared_partition_in_flight": "in_flight",
    "keyshared_partition_waiting": "waiting",
    "keyshared_partition_blocked_keys": "blocked_keys",
    "keyshared_partition_safe_cursor_offset": "safe_cursor",
    "keyshared_partition_lag": "lag",
    "keyshared_partition_paused": "paused",
    "keyshared_partition_hot_key_share": "hot_key_share",
}


def base_url(url: str) -> str:
    """``http://h:p/metrics``, ``http://h:p/hotkeys`` or ``h:p`` -> ``http://h:p``."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    for suffix in ("/metrics", "/hotkeys"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url


def parse_metrics(text: str, group: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The per-partition gauges of ``group`` in a Prometheus exposition, by topic partition.

    A process may run members of several groups; only ``group``'s series are kept, and each
    partition also records which ``member`` reported it.
    """
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            field = _GAUGES.get(sample.name)
            labels = sample.labels
            if field is None or labels.get("group") != group:
                continue
            try:
                tp = (str(labels["topic"]), int(labels["partition"]))
            except (KeyError, ValueError):
                continue
            entry = found.setdefault(tp, {"member": labels.get("member", "")})
            entry[field] = float(sample.value)
    return found


def _get(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
    return body.decode("utf-8")


def fetch_member(url: str, group: str, timeout: float) -> dict[str, object]:
    """Read one member's endpoints and merge them per partition.

    :returns: ``{"url", "partitions": [...]}``, or ``{"url", "error"}`` when it did not answer.
    """
    base = base_url(url)
    try:
        gauges = parse_metrics(_get(base + "/metrics", timeout), group)
        hot = json.loads(_get(base + "/hotkeys", timeout))
    except (OSError, urllib.error.URLError, ValueError) as exc:
        return {"url": base, "error": f"{type(exc).__name__}: {exc}"}
    merged: dict[tuple[str, int], dict[str, Any]] = {
        tp: {"topic": tp[0], "partition": tp[1], **values} for tp, values in gauges.items()
    }
    for part in hot.get("partitions", []) if isinstance(hot, dict) else []:
        try:
            tp = (str(part["topic"]), int(part["partition"]))
        except (KeyError, TypeError, ValueError):
            continue
        if gauges and tp not in gauges:
            continue  # another group's consumer in the same process
        entry = merged.setdefault(tp, {"topic": tp[0], "partition": tp[1]})
        for name in ("busiest", "slowest_seconds", "blocked", "parked", "hottest_share"):
            if name in part:
                entry[name] = part[name]
    view: dict[str, object] = {"url": base, "partitions": [merged[tp] for tp in sorted(merged)]}
    view.update(_readiness(base, timeout))
    return view


def _readiness(base: str, timeout: float) -> dict[str, object]:
    """``ready``, ``reasons``, ``holds`` and ``holdings`` (each lease, range or lock the member
    wants, holds or hands back: name, phase, age, alive) from ``/readyz``; nothing when the
    member serves no
    probes (a consumer started without a health source) or the answer is not the probe's."""
    try:
        body = _get(base + "/readyz", timeout)
    except urllib.error.HTTPError as exc:  # 503: not ready, and the body says why
        if exc.code != 503:
            return {}
        body = exc.read().decode("utf-8")
    except (OSError, urllib.error.URLError):
        return {}
    try:
        probe = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(probe, dict) or "status" not in probe:
        return {}
    holds = probe.get("holds")
    holdings = probe.get("holdings")
    return {
        "ready": probe["status"] == "ok",
        "reasons": [str(reason) for reason in probe.get("reasons", [])],
        "holds": {str(k): float(v) for k, v in holds.items()} if isinstance(holds, dict) else {},
        "holdings": [h for h in holdings if isinstance(h, dict)]
        if isinstance(holdings, list)
        else [],
    }
