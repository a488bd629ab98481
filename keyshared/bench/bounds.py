"""Computed limits a measured rate is compared with.

- ``W/L``: ``workers`` handlers of ``L`` seconds each can finish at most W/L records a second.
- The measured ``L``: ``time.sleep(L)`` overshoots by tens of microseconds on a loaded machine,
  so the bound is also given with the handler time measured here, in this run.
- The ring's balance: keyshared queues each key's records for the worker the consistent-hash
  ring picks; without work stealing the busiest worker would set the pace. Reported to show
  what stealing recovers.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from keyshared.core.ring import WorkerRing

__all__ = ["measured_sleep", "ring_balance"]


def measured_sleep(seconds: float, samples: int = 200) -> float:
    """Mean wall time of ``time.sleep(seconds)`` here and now."""
    if seconds <= 0:
        return 0.0
    began = time.perf_counter()
    for _ in range(samples):
        time.sleep(seconds)
    return (time.perf_counter() - began) / samples


def ring_balance(keys: Sequence[bytes], workers: int) -> float:
    """Mean over max records per worker when ``keys`` are spread by keyshared's ring (0..1]."""
    ring = WorkerRing(range(workers))
    per_worker = Counter(ring.worker_for(key) for key in keys)
    busiest = max(per_worker.values())
    return (len(keys) / workers) / busiest
