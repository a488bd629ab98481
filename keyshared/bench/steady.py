"""Steady-state throughput from a contender's completion times: the rate it lives at once warm.

Why two figures: the whole-run rate (first handler start to the N-th finish) includes the
start-up ramp (fetching the first batches, filling the workers, a JVM's JIT) and the tail (the
last keys' records, one after another). A backfill waits for all of it; a long-running consumer
lives at the rate between the two. The steady-state figure drops the first and last ``trim``
(5 %) of completions: the records finished between the 5th and the 95th percentile completion
time, divided by that span.

How completions are recorded, cheaply and the same way in every contender (Python, the
``keyshared run`` subprocess, the peers' own processes, Parallel Consumer's Java harness): the
time of every ``every``-th completion, a *mark*, with ``every`` chosen by :func:`mark_every` so a
run has about :data:`MARKS` of them whatever its size. A handler only compares its count with
the next mark; the marks cross a process boundary as one short JSON list. Counts are exact at
each mark, so the only approximation is rounding the 5th and 95th percentiles inwards to a mark.

Example::

    steady = steady_state([0.10, 0.19, 0.30, 0.41], every=250)  # 1,000 records
    steady.rate  # 500 records / (0.30 - 0.10) s: the marks of completions 250 and 750
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MARKS", "TRIM", "Steady", "mark_every", "steady_state"]

MARKS = 1_000  # marks per run: enough that rounding 5 % to a mark moves it by 0.1 % at most
TRIM = 0.05  # the share of completions dropped at each end


def mark_every(records: int) -> int:
    """How many completions apart the marks of a ``records``-record run are (at least 1)."""
    return max(1, records // MARKS)


@dataclass(frozen=True)
class Steady:
    """The steady-state window of a run.

    :param records: completions inside the window (after its first mark, up to its last).
    :param seconds: the window's span.
    :param start: when the window opens, in the marks' time base (for a run timed from its
        first handler start: the start-up the figure leaves out).
    :param end: when it closes (the whole run minus ``end``: the tail left out).
    """

    records: int
    seconds: float
    start: float
    end: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds


def steady_state(marks: Sequence[float], every: int, trim: float = TRIM) -> Steady | None:
    """The middle ``1 - 2 x trim`` of completions, from the time of every ``every``-th one.

    ``marks[i]`` is when completion ``(i + 1) x every`` happened. They are sorted first: two
    threads can reach consecutive marks and stamp them in the other order. The window runs from
    the first mark at or after the ``trim`` quantile of completions to the last mark at or
    before the ``1 - trim`` quantile; its rate is the completions between those two marks over
    the time between them.

    :returns: None when the window is empty or takes no time (too few marks, or every mark
        stamped at once): no steady state can be told from such a run.
    :raises ValueError: ``every`` < 1 or ``trim`` outside [0, 0.5).
    """
    if every < 1 or not 0 <= trim < 0.5:
        raise ValueError(f"steady_state needs every >= 1 and 0 <= trim < 0.5, got {every}, {trim}")
    times = sorted(marks)
    # Marks counted from 1 (mark k is completion k x every); the quantiles of completions are
    # the same quantiles of marks. The epsilon keeps 0.05 x 1000 at 50, not 51.
    low = max(1, math.ceil(trim * len(times) - 1e-9))
    high = math.floor((1 - trim) * len(times) + 1e-9)
    if high <= low:
        return None
    start, end = times[low - 1], times[high - 1]
    if end <= start:
        return None
    return Steady((high - low) * every, end - start, start, end)
