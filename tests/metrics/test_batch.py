"""``observe_many`` must leave a histogram exactly as observing each value one by one would.

The settlement path records a group's handler and end-to-end times in bulk, through two code
paths (a plain loop for a handful of values, a C-counted one for more): either way, the
exported buckets, count and sum are the dashboard's, so they must not drift from
``Histogram.observe``.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from keyshared.metrics.batch import observe_many

BUCKETS = (0.001, 0.005, 0.01, 0.1, 1.0, 10.0)
values = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)


def _samples(histogram: Histogram) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels.get("le", "")): s.value
        for metric in histogram.collect()
        for s in metric.samples
        if not s.name.endswith("_created")
    }


@settings(max_examples=200, deadline=None)
@given(groups=st.lists(st.lists(values, max_size=40), max_size=6))
def test_bulk_observations_equal_one_by_one(groups: list[list[float]]) -> None:
    one = Histogram("one", "", registry=CollectorRegistry(), buckets=BUCKETS)
    bulk = Histogram("bulk", "", registry=CollectorRegistry(), buckets=BUCKETS)
    for group in groups:
        for value in group:
            one.observe(value)
        observe_many(bulk, group)
    a = {(name.replace("one", "bulk", 1), le): v for (name, le), v in _samples(one).items()}
    b = _samples(bulk)
    assert a.keys() == b.keys()
    for key, value in a.items():
        assert math.isclose(value, b[key], rel_tol=1e-9, abs_tol=1e-9), key
