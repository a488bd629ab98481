"""Recording many observations at once, for the per-record hot path.

prometheus-client takes a lock per ``inc()`` and walks the bucket list in Python per
``observe()``: a few microseconds per record, which is most of the cost of a fast handler.
Workers therefore tally a batch of successes and record it here: one ``inc(n)`` per counter,
one bucket increment per occupied bucket and one sum increment per histogram.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from functools import partial
from typing import Any

__all__ = ["observe_many"]

_FEW = 8  # at most this many values: a plain loop is cheaper than the Counter (2.3 vs 5 us at 1)


def observe_many(histogram: Any, values: list[float]) -> None:
    """Same effect as ``histogram.observe(v)`` for every ``v``, in far fewer locked steps.

    Uses the label child's bucket bounds and per-bucket values (stable across prometheus-client
    releases for years); falls back to plain ``observe`` if they are not there.
    """
    if not values:
        return
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None or len(buckets) != len(bounds):
        for value in values:
            histogram.observe(value)
        return
    if len(values) <= _FEW:
        # A handful (slow handlers settle one or two at a time): building the Counter costs
        # more than it saves.
        for value in values:
            buckets[bisect_left(bounds, value)].inc(1)
    else:
        # Counted in C (Counter over a map): no interpreted step per value, one per occupied
        # bucket.
        for index, count in Counter(map(partial(bisect_left, bounds), values)).items():
            buckets[index].inc(count)
    total.inc(sum(values))
