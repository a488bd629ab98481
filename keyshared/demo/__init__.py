"""``keyshared demo``: a keyed order workload run end to end, with proofs in the summary.

* :mod:`~keyshared.demo.workload` — orders per customer with sequence numbers, hot keys, poison.
* :mod:`~keyshared.demo.verifier` — checks per-key order while the handlers run.
* :mod:`~keyshared.demo.handler` — the I/O-like handler that declines poison orders.
* :mod:`~keyshared.demo.checks` — reads the DLQ back and compares commits with end offsets.
* :mod:`~keyshared.demo.run` / :mod:`~keyshared.demo.summary` — the steps and the report.
"""

from __future__ import annotations

from keyshared.demo.cluster import ClusterChoice, choose_cluster
from keyshared.demo.run import DemoOutcome, DemoSettings, run_demo
from keyshared.demo.summary import print_summary

__all__ = [
    "ClusterChoice",
    "DemoOutcome",
    "DemoSettings",
    "choose_cluster",
    "print_summary",
    "run_demo",
]
