"""Computed limits a measured rate is compared with.

- ``W/L``: ``workers`` handlers of ``L`` seconds each can finish at most W/L records a second.
- The measured ``L``: ``time.sleep(L)`` overshoots by tens of microseconds on a loaded machine,
  so the bound is also given with the handler time measured here, in this run.
- The order bound: per-key order runs a key's records one after another, so no ordered consumer
  finishes ``N`` records sooner than ``max(N x L / W, hottest key's records x L)``. With a few
  records per key it is W/L; under Zipf skew the hottest key sets it.
- The ring's balance: keyshared queues each key's records for the worker the consistent-hash
  ring picks; without work stealing the busiest worker would set the pace. Reported to show
  what stealing recovers.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from keyshared.core.ring import WorkerRing

__all__ = ["OrderBound", "measured_sleep", "order_bound", "ring_balance"]


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


@dataclass(frozen=True)
class OrderBound:
    """The fastest any per-key-ordered consumer with ``W`` slots can handle a topic.

    :param rate: records/s, ``records / seconds``.
    :param seconds: ``max(width_seconds, hottest_key_seconds)``.
    :param width_seconds: ``N x L / W``: every slot busy all the time.
    :param hottest_key_seconds: ``hottest key's records x L``: that key's records in a row.
    :param hottest_key_records: records of the busiest key.
    """

    rate: float
    seconds: float
    width_seconds: float
    hottest_key_seconds: float
    hottest_key_records: int

    @property
    def hot_key_bound(self) -> bool:
        """Whether the hottest key, not the worker count, sets the bound."""
        return self.hottest_key_seconds > self.width_seconds


def order_bound(keys: Sequence[bytes], workers: int, handler_s: float) -> OrderBound:
    """The :class:`OrderBound` of a topic whose records have ``keys``, for ``workers`` slots
    and a handler of ``handler_s`` seconds.

    :raises ValueError: no keys, no workers, or a handler that takes no time (no bound then).
    """
    if not keys or workers < 1 or handler_s <= 0:
        raise ValueError(
            f"order bound needs records, workers >= 1 and handler_s > 0, got "
            f"{len(keys)} records, {workers} workers, handler_s={handler_s}"
        )
    hottest = Counter(keys).most_common(1)[0][1]
    width_s = len(keys) * handler_s / workers
    hot_s = hottest * handler_s
    seconds = max(width_s, hot_s)
    return OrderBound(len(keys) / seconds, seconds, width_s, hot_s, hottest)
