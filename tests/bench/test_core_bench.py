"""Micro-benchmarks of the per-record and per-commit paths of the pure core.

Disabled by default (``--benchmark-disable`` in pyproject), so each runs once as a plain test.
Measure with ``pytest tests/bench --benchmark-enable``.
"""

from __future__ import annotations

import random

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from keyshared.core.filters import KeyFilter
from keyshared.core.hotkeys import SpaceSaving
from keyshared.core.offsets import decode_finished, encode_finished
from keyshared.core.ring import WorkerRing
from keyshared.core.slots import SlotMap, slot_of, split_evenly

KEY = b"customer-000042"


def test_ring_lookup(benchmark: BenchmarkFixture) -> None:
    ring = WorkerRing(range(16))
    assert benchmark(ring.worker_for, KEY) in ring.workers


def test_slot_of(benchmark: BenchmarkFixture) -> None:
    assert 0 <= benchmark(slot_of, KEY) < 65536


def test_slot_owner_lookup(benchmark: BenchmarkFixture) -> None:
    slot_map = SlotMap({r: f"member-{i}" for i, r in enumerate(split_evenly(64))})
    assert benchmark(slot_map.owner_of, 40_000) is not None


@pytest.mark.parametrize(
    ("patterns", "key", "expected"),
    [
        (["payment*"], b"payment-123", True),
        (["invoice", "payment*", "eu-west-?"], b"customer-000042", False),
        (["*-eu-*-?"], b"orders-eu-west-1", True),
    ],
    ids=["prefix-hit", "three-patterns-miss", "general-glob-hit"],
)
def test_filter_match(
    benchmark: BenchmarkFixture, patterns: list[str], key: bytes, expected: bool
) -> None:
    key_filter = KeyFilter(patterns)
    assert benchmark(key_filter.accepts, key) is expected


def _typical_finished(count: int) -> list[int]:
    rng = random.Random(0)
    finished: list[int] = []
    offset = 1_000_001
    while len(finished) < count:
        if rng.random() >= 0.05:
            finished.append(offset)
        offset += 1
    return finished


def test_codec_encode_1000(benchmark: BenchmarkFixture) -> None:
    finished = _typical_finished(1000)
    text = benchmark(encode_finished, 1_000_000, finished)
    assert text is not None and len(text) < 4000


def test_codec_decode_1000(benchmark: BenchmarkFixture) -> None:
    finished = _typical_finished(1000)
    text = encode_finished(1_000_000, finished)
    assert benchmark(decode_finished, 1_000_000, text) == frozenset(finished)


def test_hot_key_sketch_add(benchmark: BenchmarkFixture) -> None:
    sketch = SpaceSaving(64)
    keys = [f"k{index}".encode() for index in range(1000)]
    for key in keys:
        sketch.add(key)
    benchmark(sketch.add, b"k-new")
    assert sketch.total > 1000
