"""Exactly-once across a hand-over after the commit metadata overflowed.

One key is blocked by ``poison="block"`` at its first record, so the cursor stays there while
everything else finishes; the blocked key's later records are holes above the cursor, and the
finished set soon stops fitting the commit metadata (its budget is lowered here so that a few
thousand records suffice). The records come in two parts: a commit names every finished record
of the first part (it still fits), and the second part makes the set overflow, so that the nearest
runs of the whole set end below what that commit named. Then the member stops and a second one
takes over. Read with
``isolation.level=read_committed``, every record's output must appear exactly once and in
per-key order: a record whose outputs one transaction committed must never run again, whatever
a later commit's metadata has room for.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from itertools import pairwise
from typing import Any

import pytest
from prometheus_client import REGISTRY

from keyshared import KeySharedConsumer, Record, RetryPolicy
from keyshared.core.offsets import decode_finished
from keyshared.dev.topics import GroupFactory, TopicFactory
from keyshared.kafka.commits import Committer
from keyshared.kafka.finished_sets import FinishedSets
from tests.kafka.support.inprocess import Running
from tests.kafka.support.journal import committed, produce, wait_for
from tests.kafka.test_exactly_once import Seen, _committed_to_end, read_committed

RECORDS = 20_000
BLOCKED_SHARE = 0.05
METADATA_BYTES = 1000  # overflows at about 800 holes; 4000 would take ~70,000 records
FIRST_PART = 14_000  # fits the metadata whole; the nearest runs of all 20,000 end at ~12,200
BLOCKED = b"S"


class Outputs:
    """The handler: one output per record (its sequence under its key, space-padded to
    ``pad`` bytes); fails the blocked key's first record when told to; counts successes."""

    def __init__(self, out: str, fail_first_blocked: bool, pad: int = 0) -> None:
        self._out = out
        self._fail = fail_first_blocked
        self._pad = pad
        self._lock = threading.Lock()
        self.done = 0

    def __call__(self, record: Record) -> None:
        if self._fail and record.raw_key == BLOCKED and int(record.value) == 0:
            raise ValueError("poison: the key blocks here")
        assert record.output is not None  # exactly-once consumers give every record one
        value = record.value.ljust(self._pad)
        record.output.produce(self._out, key=record.raw_key, value=value)
        with self._lock:
            self.done += 1


def blocked_records(count: int, share: float, seed: int) -> list[tuple[bytes | None, int]]:
    """``count`` + 1 records numbered from 0: the blocked key's first, then ``share`` of them
    on the blocked key and every other on a key of its own."""
    rng = random.Random(seed)
    records: list[tuple[bytes | None, int]] = [(BLOCKED, 0)]
    for seq in range(1, count + 1):
        key = BLOCKED if rng.random() < share else b"u%d" % seq
        records.append((key, seq))
    return records


def member(
    bootstrap: str,
    group: str,
    source: str,
    name: str,
    handler: Outputs,
    client: dict[str, str] | None = None,
    **options: Any,
) -> Running:
    """An exactly-once member that blocks a key at its poison record (``client``: more client
    properties, e.g. credentials)."""
    config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name}
    return Running(
        KeySharedConsumer(
            {**config, **(client or {})},
            [source],
            handler,
            workers=4,
            exactly_once=True,
            poison="block",
            commit_interval=0.2,
            retry=RetryPolicy(max_attempts=1),
            drain_timeout=2,
            **options,
        )
    )


def _metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _faults(seen: Seen, expected: dict[bytes | None, list[int]]) -> dict[str, Any]:
    duplicates = sum(n - 1 for values in seen.values() for n in Counter(values).values())
    order_breaks = sum(1 for values in seen.values() for a, b in pairwise(values) if b < a)
    missing = sum(len(set(v) - set(seen.get(k, []))) for k, v in expected.items())
    return {"duplicates": duplicates, "order_breaks": order_breaks, "missing": missing}


@pytest.mark.parametrize("side_topic", [True, False], ids=["side-topic", "no-side-topic"])
def test_a_handover_after_metadata_overflow_repeats_no_output(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    new_group: GroupFactory,
    monkeypatch: pytest.MonkeyPatch,
    side_topic: bool,
) -> None:
    """With the side topic the whole finished set is committed; without it (it cannot be
    created), the metadata names a monotone part and the rest's outputs wait."""
    monkeypatch.setattr(Committer.__init__, "__defaults__", (METADATA_BYTES,))
    if not side_topic:
        monkeypatch.setattr(FinishedSets, "ready", lambda self: False)
    source = new_topic(partitions=1)
    out = new_topic(partitions=1)
    group = new_group("eos-overflow")
    records = blocked_records(RECORDS, BLOCKED_SHARE, seed=36)
    others = sum(1 for key, _ in records if key != BLOCKED)
    # In two parts, so that one commit surely names everything finished in the first part
    # (it fits the metadata whole), before the second part makes the finished set overflow.
    split = FIRST_PART + 1
    produce(kafka_bootstrap, source, records[:split])
    first_part = sum(1 for key, _ in records[:split] if key != BLOCKED)

    first = Outputs(out, fail_first_blocked=True)
    run = member(kafka_bootstrap, group, source, "first", first)
    labels = {"group": group, "member": "first"}

    def names_the_first_part() -> bool:
        [(cursor, metadata)] = committed(kafka_bootstrap, group, source).values()
        return cursor == 0 and len(decode_finished(cursor, metadata)) == first_part

    wait_for(names_the_first_part, 60, "a commit naming every record of the first part")
    produce(kafka_bootstrap, source, records[split:])
    wait_for(lambda: first.done == others, 90, "the first member to finish every other key")
    wait_for(
        lambda: _metric("keyshared_commit_metadata_overflows_total", **labels),
        30,
        "the commit metadata to overflow",
    )
    # Graceful: the blocked record is not running, so the drain ends at once and the final
    # commit carries the last window (periodic commits skip an unchanged one).
    run.stop()

    second = Outputs(out, fail_first_blocked=False)
    run = member(kafka_bootstrap, group, source, "second", second)
    _committed_to_end(kafka_bootstrap, group, source, 90)
    run.stop()

    expected: dict[bytes | None, list[int]] = {}
    for produced, seq in records:
        expected.setdefault(produced, []).append(seq)
    seen = read_committed(kafka_bootstrap, out, len(records))
    faults = _faults(seen, expected)
    assert faults == {"duplicates": 0, "order_breaks": 0, "missing": 0}, (
        f"{faults} among {sum(map(len, seen.values()))} outputs of {len(records)} records; "
        f"the second member ran {second.done} records"
    )
    assert set(seen) == set(expected)


def test_a_blocked_key_holds_back_only_its_own_outputs(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    new_group: GroupFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The finished set outgrows the metadata while one key is blocked: every other record's
    output is visible while the first member still runs (the whole set went to a side record
    in the same transaction), and the member that takes over runs the blocked key's records
    and nothing else."""
    monkeypatch.setattr(Committer.__init__, "__defaults__", (METADATA_BYTES,))
    source = new_topic(partitions=1)
    out = new_topic(partitions=1)
    group = new_group("eos-side")
    records = blocked_records(RECORDS, BLOCKED_SHARE, seed=38)
    blocked = sum(1 for key, _ in records if key == BLOCKED)
    others = len(records) - blocked
    produce(kafka_bootstrap, source, records)

    first = Outputs(out, fail_first_blocked=True)
    run = member(kafka_bootstrap, group, source, "first", first)
    labels = {"group": group, "member": "first"}
    wait_for(lambda: first.done == others, 90, "the first member to finish every other key")
    assert _metric("keyshared_commit_metadata_overflows_total", **labels) > 0
    # A few commit intervals (0.2 s each) after the last of them finished, read_committed.
    seen = read_committed(kafka_bootstrap, out, others, timeout=20)
    visible = sum(len(values) for key, values in seen.items() if key != BLOCKED)
    assert visible == others, f"{others - visible} of {others} other outputs still held back"
    assert not seen.get(BLOCKED)
    run.stop()

    second = Outputs(out, fail_first_blocked=False)
    run = member(kafka_bootstrap, group, source, "second", second)
    _committed_to_end(kafka_bootstrap, group, source, 90)
    run.stop()
    assert second.done == blocked, f"the second member ran {second.done} records, not {blocked}"

    expected: dict[bytes | None, list[int]] = {}
    for produced, seq in records:
        expected.setdefault(produced, []).append(seq)
    seen = read_committed(kafka_bootstrap, out, len(records))
    assert _faults(seen, expected) == {"duplicates": 0, "order_breaks": 0, "missing": 0}
