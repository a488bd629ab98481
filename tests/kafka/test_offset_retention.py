"""How often unchanged offsets are committed again (keyshared/kafka/offset_retention.py); the
broker's own reading and an exclusive group's offsets under a one-minute retention are in
tests/coordinator/test_offset_expiry.py."""

from __future__ import annotations

import pytest

from keyshared.kafka.commits import OFFSET_REFRESH_S
from keyshared.kafka.offset_retention import refresh_interval


@pytest.mark.parametrize(
    ("minutes", "seconds"),
    [
        (None, OFFSET_REFRESH_S),  # unknown (no DescribeConfigs): hourly
        (0, OFFSET_REFRESH_S),
        (1, 15.0),  # a test cluster's minute: every quarter of it
        (60 * 2, 1800.0),
        (7 * 24 * 60, OFFSET_REFRESH_S),  # Kafka's default week: hourly
    ],
)
def test_unchanged_offsets_are_refreshed_within_a_quarter_of_the_retention(
    minutes: float | None, seconds: float
) -> None:
    assert refresh_interval(minutes) == seconds
