"""Held exactly-once outputs have a byte budget, and reaching it pauses fetching (real broker).

Outputs wait, ready, when no transaction can carry them yet: here the commit metadata has no
room to name the finished records above a cursor that a blocked key holds (``poison="block"``
on the key's first record, metadata budget lowered so that a few thousand records suffice), and
the finished-set topic that would carry the whole set cannot be had (made to fail here; a
member without permission to create it meets the same).
Without a budget, fetching goes on and the waiting outputs grow with the topic. With
``max_held_output_bytes``, the member pauses the partition once they reach it: the records
it has read stop growing while it stays alive and committing, and the outputs it holds stay
within the budget plus what was already fetched when it paused. Nothing is lost: a second
member, after the first stops, writes every output exactly once, in per-key order.
"""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from keyshared.dev.topics import GroupFactory, TopicFactory
from keyshared.kafka.commits import Committer
from keyshared.kafka.finished_sets import FinishedSets
from tests.kafka.support.inprocess import Running
from tests.kafka.support.journal import produce, wait_for
from tests.kafka.test_exactly_once import (
    _committed_to_end,
    assert_exactly_once,
    read_committed,
)
from tests.kafka.test_exactly_once_overflow import Outputs, blocked_records, member

RECORDS = 12_000
BLOCKED_SHARE = 0.3  # the metadata (1,000 bytes) overflows after ~800 holes: ~2,700 records
METADATA_BYTES = 1000
OUTPUT_BYTES = 2048
BUDGET = 200_000  # about 100 outputs
POLL_BATCH = 1000  # what one consume() returns at most: fetched before the pause, finished after


def _member(bootstrap: str, group: str, source: str, name: str, handler: Outputs) -> Running:
    return member(bootstrap, group, source, name, handler, max_held_output_bytes=BUDGET)


def _metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_held_outputs_at_their_budget_pause_fetching_and_lose_nothing(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    new_group: GroupFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Committer.__init__, "__defaults__", (METADATA_BYTES,))
    monkeypatch.setattr(FinishedSets, "ready", lambda self: False)
    source = new_topic(partitions=1)
    out = new_topic(partitions=1)
    group = new_group("eos-held-budget")
    records = blocked_records(RECORDS, BLOCKED_SHARE, seed=6)
    produce(kafka_bootstrap, source, records)

    first = Outputs(out, fail_first_blocked=True, pad=OUTPUT_BYTES)
    run = _member(kafka_bootstrap, group, source, "first", first)
    labels = {"group": group, "member": "first"}
    held = "keyshared_held_output_bytes"
    received = "keyshared_records_received_total"
    wait_for(lambda: _metric(held, **labels) >= BUDGET, 90, "held outputs to reach the budget")
    wait_for(
        lambda: _metric("keyshared_paused_partitions", **labels) == 1,
        30,
        "the partition to pause for its held outputs",
    )
    read_at_pause = _metric(received, **labels)
    # The member stays alive (its sampler ages the blocked record) while it reads nothing more.
    age = "keyshared_partition_oldest_incomplete_age_seconds"
    where = {**labels, "topic": source, "partition": "0"}
    aged_from = _metric(age, **where)
    peak = 0.0

    def aged_three_seconds() -> bool:
        nonlocal peak
        peak = max(peak, _metric(held, **labels))
        return _metric(age, **where) >= aged_from + 3

    wait_for(aged_three_seconds, 60, "the sampler to age the blocked record by 3 s while paused")
    read_after = _metric(received, **labels)
    assert read_after == read_at_pause, (
        f"the member read {read_after - read_at_pause:.0f} records after pausing for "
        "its held outputs"
    )
    # Without the budget it reads on to the end, holding every later record's output.
    assert read_after < len(records) - 2 * POLL_BATCH, (
        f"the budget did not hold fetching back: {read_after:.0f} of {len(records)} read, "
        f"{peak:.0f} bytes of outputs held"
    )
    run.stop()

    second = Outputs(out, fail_first_blocked=False, pad=OUTPUT_BYTES)
    run = _member(kafka_bootstrap, group, source, "second", second)
    _committed_to_end(kafka_bootstrap, group, source, 120)
    run.stop()

    expected: dict[bytes | None, list[int]] = {}
    for produced, seq in records:
        expected.setdefault(produced, []).append(seq)
    assert_exactly_once(read_committed(kafka_bootstrap, out, len(records)), expected)
