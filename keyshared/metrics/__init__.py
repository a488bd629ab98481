"""Prometheus metrics of keyshared: the families, the facades that update them, the endpoint.

* :mod:`keyshared.metrics.families` — every metric name, type and label set, in one place.
* :class:`ConsumerMetrics` / :class:`PartitionMetrics` — what the consumer calls.
* :class:`CoordinatorMetrics` — what the ZooKeeper coordinator calls.
* :func:`start_metrics_server` — ``/metrics`` and ``/hotkeys`` on one port per process.

The families live in ``prometheus_client.REGISTRY`` so they appear next to the process and
platform collectors, and so several consumers in one process share them (told apart by
``member``).
"""

from __future__ import annotations

from keyshared.metrics.consumer import ConsumerMetrics, PartitionMetrics
from keyshared.metrics.coordinator import CoordinatorMetrics
from keyshared.metrics.server import (
    HotKeysSource,
    MetricsServer,
    key_text,
    start_metrics_server,
)

__all__ = [
    "ConsumerMetrics",
    "CoordinatorMetrics",
    "HotKeysSource",
    "MetricsServer",
    "PartitionMetrics",
    "key_text",
    "start_metrics_server",
]
