"""Tests for the consistent-hash worker ring: determinism, stability on resize, balance."""

from __future__ import annotations

import doctest
from bisect import bisect_left
from collections import Counter

import mmh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshared.core import ring as ring_module
from keyshared.core.ring import EmptyRingError, WorkerRing

KEYS = [f"key-{index}".encode() for index in range(20_000)]


def reference_worker_for(workers: list[int], vnodes: int, key: bytes) -> int:
    """The ring as specified: unsigned 32-bit points, first point >= key hash, wrap around."""
    points = sorted(
        (mmh3.hash(f"{worker}-{index}".encode(), 0, False), worker)
        for worker in workers
        for index in range(vnodes)
    )
    key_hash = mmh3.hash(key, 0, False)
    position = bisect_left(points, (key_hash, -1))
    return points[position % len(points)][1]


def test_golden_mapping_is_stable_across_versions() -> None:
    # Pinned so that an accidental change of hash, seed or vnode naming fails loudly: every
    # process of a deployment, old or new, must route a key to the same worker.
    ring = WorkerRing(range(4))
    assert [ring.worker_for(key) for key in (b"", b"a", b"customer-42", b"\xff" * 8)] == [
        reference_worker_for([0, 1, 2, 3], 100, key)
        for key in (b"", b"a", b"customer-42", b"\xff" * 8)
    ]
    assert [ring.worker_for(f"k{index}".encode()) for index in range(12)] == GOLDEN_4_WORKERS


GOLDEN_4_WORKERS = [2, 1, 0, 0, 2, 1, 0, 1, 2, 2, 2, 3]


def test_empty_ring_raises_a_clear_error() -> None:
    ring = WorkerRing([])
    with pytest.raises(EmptyRingError, match="no workers"):
        ring.worker_for(b"x")
    ring.add(7)
    assert ring.worker_for(b"x") == 7
    ring.remove(7)
    with pytest.raises(EmptyRingError):
        ring.worker_for(b"x")


def test_single_worker_gets_every_key() -> None:
    ring = WorkerRing([5])
    assert {ring.worker_for(key) for key in KEYS[:500]} == {5}


def test_add_remove_and_workers() -> None:
    ring = WorkerRing([1, 2, 2])
    assert ring.workers == frozenset({1, 2})
    assert len(ring) == 2 and 1 in ring and 3 not in ring
    ring.add(3)
    ring.add(3)
    assert ring.workers == frozenset({1, 2, 3})
    ring.remove(1)
    assert ring.workers == frozenset({2, 3})
    with pytest.raises(KeyError, match="worker 1"):
        ring.remove(1)
    assert repr(ring) == "WorkerRing(workers=[2, 3], vnodes=100)"


@pytest.mark.parametrize("vnodes", [0, -1, True, 1.5])
def test_invalid_vnodes_named(vnodes: object) -> None:
    with pytest.raises(ValueError, match="vnodes"):
        WorkerRing([1], vnodes=vnodes)  # type: ignore[arg-type]


def test_worker_ids_must_be_int() -> None:
    with pytest.raises(TypeError, match="int"):
        WorkerRing(["a"])  # type: ignore[list-item]


def test_remove_then_add_restores_mapping() -> None:
    ring = WorkerRing(range(5))
    before = [ring.worker_for(key) for key in KEYS[:2000]]
    ring.remove(3)
    ring.add(3)
    assert [ring.worker_for(key) for key in KEYS[:2000]] == before


@settings(max_examples=60, deadline=None)
@given(
    workers=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=12),
    vnodes=st.integers(min_value=1, max_value=40),
    keys=st.lists(st.binary(max_size=24), min_size=1, max_size=40),
    data=st.data(),
)
def test_deterministic_and_matches_reference(
    workers: list[int], vnodes: int, keys: list[bytes], data: st.DataObject
) -> None:
    ring = WorkerRing(workers, vnodes=vnodes)
    shuffled = data.draw(st.permutations(workers))
    other = WorkerRing(shuffled, vnodes=vnodes)
    unique = sorted(set(workers))
    for key in keys:
        expected = reference_worker_for(unique, vnodes, key)
        assert ring.worker_for(key) == expected
        assert other.worker_for(key) == expected


@pytest.mark.parametrize("workers", [2, 8, 64])
def test_adding_a_worker_remaps_about_one_in_n_plus_one(workers: int) -> None:
    ring = WorkerRing(range(workers))
    before = [ring.worker_for(key) for key in KEYS]
    ring.add(workers)
    after = [ring.worker_for(key) for key in KEYS]
    moved = [(old, new) for old, new in zip(before, after, strict=True) if old != new]
    fraction = len(moved) / len(KEYS)
    ideal = 1 / (workers + 1)
    print(
        f"\nremap {workers}->{workers + 1}: {fraction:.4f} of {len(KEYS)} keys moved "
        f"(ideal {ideal:.4f}, ratio {fraction / ideal:.2f})"
    )
    # Only keys that now belong to the new worker may move: nothing shuffles between old ones.
    assert all(new == workers for _, new in moved)
    assert 0.6 * ideal <= fraction <= 1.5 * ideal


def test_removing_a_worker_moves_only_its_keys() -> None:
    ring = WorkerRing(range(6))
    before = [ring.worker_for(key) for key in KEYS]
    ring.remove(2)
    after = [ring.worker_for(key) for key in KEYS]
    for old, new in zip(before, after, strict=True):
        assert old == new or old == 2


@pytest.mark.parametrize("workers", [4, 8, 16])
def test_balance_with_100_vnodes(workers: int) -> None:
    ring = WorkerRing(range(workers))
    keys = [f"order-{index}".encode() for index in range(100_000)]
    load = Counter(ring.worker_for(key) for key in keys)
    ratio = max(load.values()) / min(load.values())
    print(f"\nbalance {workers} workers x 100 vnodes over 100000 keys: max/min = {ratio:.2f}")
    assert len(load) == workers
    assert ratio < 1.8


def test_docstring_examples_run() -> None:
    results = doctest.testmod(ring_module)
    assert results.attempted > 0 and results.failed == 0
