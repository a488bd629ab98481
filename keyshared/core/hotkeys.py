"""Bounded "space-saving" sketch of the heaviest keys (Metwally, Agrawal, El Abbadi, 2005).

Why: per-key parallelism is only as good as the key distribution. One hot key serialises its
share of the traffic on one worker, and one slow key holds the commit cursor back. Operators need
to see which keys those are, but a topic can have millions of keys, so an exact count per key is
out of the question. Space-saving keeps ``capacity`` counters in fixed memory and still
guarantees that every key with more than ``total / capacity`` of the weight is present, with a
count that overestimates its true weight by at most its recorded error.

The same sketch serves both views: weight 1 per record gives the busiest keys, weight = handler
seconds gives the slowest keys.

Example::

    >>> sketch = SpaceSaving(capacity=2)
    >>> for key in [b"a", b"a", b"b", b"c", b"a"]:
    ...     sketch.add(key)
    >>> sketch.top(1)
    [(b'a', 3.0, 0.0)]
    >>> sketch.share_of_top()
    0.6
"""

from __future__ import annotations

import heapq
import math

__all__ = ["SpaceSaving"]


class SpaceSaving:
    """Top-K heavy hitters over weighted keys in O(capacity) memory.

    :param capacity: number of counters kept; keys above ``1 / capacity`` of the total weight
        are guaranteed to be tracked.
    """

    __slots__ = ("_capacity", "_counts", "_errors", "_heap", "_total")

    def __init__(self, capacity: int = 64) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        self._capacity = capacity
        self._counts: dict[bytes, float] = {}
        self._errors: dict[bytes, float] = {}
        # (count, key) for every counter, plus stale entries left behind by increments; the
        # smallest *current* entry is the eviction victim. Rebuilt when stale entries pile up.
        self._heap: list[tuple[float, bytes]] = []
        self._total = 0.0

    @property
    def capacity(self) -> int:
        """Maximum number of keys tracked."""
        return self._capacity

    @property
    def total(self) -> float:
        """Sum of all weights added since creation or the last ``clear``."""
        return self._total

    def __len__(self) -> int:
        return len(self._counts)

    def add(self, key: bytes, weight: float = 1.0) -> None:
        """Record ``weight`` (>= 0, finite) for ``key``."""
        if not 0.0 <= weight < math.inf:
            raise ValueError(f"weight must be finite and >= 0, got {weight!r}")
        self._total += weight
        counts = self._counts
        if key in counts:
            count = counts[key] + weight
        elif len(counts) < self._capacity:
            count = weight
            self._errors[key] = 0.0
        else:
            # Take over the smallest counter: the newcomer may have been seen up to that many
            # times while untracked, which becomes its error bound.
            victim, floor = self._pop_min()
            del counts[victim], self._errors[victim]
            count = floor + weight
            self._errors[key] = floor
        counts[key] = count
        heapq.heappush(self._heap, (count, key))
        if len(self._heap) > 4 * self._capacity + 16:
            self._heap = [(value, name) for name, value in counts.items()]
            heapq.heapify(self._heap)

    def top(self, n: int) -> list[tuple[bytes, float, float]]:
        """The ``n`` heaviest keys as ``(key, count, error)``, heaviest first.

        ``count`` overestimates the key's true weight by at most ``error``; ``count - error`` is
        a guaranteed lower bound.
        """
        ranked = sorted(self._counts.items(), key=lambda item: (-item[1], item[0]))
        return [(key, count, self._errors[key]) for key, count in ranked[: max(n, 0)]]

    def share_of_top(self) -> float:
        """The hottest key's estimated share of all weight (0.0 when nothing was added)."""
        if not self._counts or self._total <= 0.0:
            return 0.0
        return min(max(self._counts.values()) / self._total, 1.0)

    def clear(self) -> None:
        """Forget everything, e.g. at the start of a new reporting interval."""
        self._counts.clear()
        self._errors.clear()
        self._heap.clear()
        self._total = 0.0

    def _pop_min(self) -> tuple[bytes, float]:
        heap, counts = self._heap, self._counts
        while True:
            count, key = heapq.heappop(heap)
            if counts.get(key) == count:
                return key, count
