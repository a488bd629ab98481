"""Micro-benchmarks of InFlightWindow: admit + complete per record, and memory per entry.

Disabled by default (``--benchmark-disable`` in pyproject's addopts: each runs once as a test).
Measure with::

    pytest tests/bench/test_window_bench.py --benchmark-enable -s

Nothing here asserts a time. The memory figure is asserted to stay below 1 KiB per in-flight
entry (the goal of issue 3): tracemalloc counts allocations exactly, so it is deterministic for
a given interpreter.
"""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections import deque

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from keyshared.core.window import InFlightWindow

KEYS = 10_000
WORKERS = 16
IN_FLIGHT = 1_000
BATCH = 1_000  # records per benchmark round
PAYLOAD = object()  # a small shared payload: the window's own cost is what is measured

pytestmark = pytest.mark.unit  # I/O-free, and quick while benchmarks are disabled


def make_stream(n: int, seed: int = 1) -> list[tuple[bytes, int]]:
    """(key, worker) pairs: random keys over KEYS, each key pinned to one of WORKERS."""
    rng = random.Random(seed)
    keys = [b"key-%d" % i for i in range(KEYS)]
    workers = [rng.randrange(WORKERS) for _ in range(KEYS)]
    return [(keys[k], workers[k]) for k in (rng.randrange(KEYS) for _ in range(n))]


class SteadyState:
    """A window kept at ~IN_FLIGHT records: each step admits one and completes the oldest."""

    def __init__(self) -> None:
        self.stream = make_stream(1 << 16)
        self.window: InFlightWindow[object] = InFlightWindow(
            0, max_window=4 * IN_FLIGHT, per_worker_capacity=IN_FLIGHT
        )
        self.running: deque[int] = deque()
        self.offset = 0
        for _ in range(IN_FLIGHT):
            self._admit()

    def _admit(self) -> None:
        key, worker = self.stream[self.offset & 0xFFFF]
        entry = self.window.admit(self.offset, key, worker, PAYLOAD, 0.0)
        self.offset += 1
        if entry is not None:
            self.running.append(entry.offset)

    def step(self, n: int) -> None:
        window, running, stream = self.window, self.running, self.stream
        offset = self.offset
        for _ in range(n):
            key, worker = stream[offset & 0xFFFF]
            entry = window.admit(offset, key, worker, PAYLOAD, 0.0)
            offset += 1
            if entry is not None:
                running.append(entry.offset)
            for released in window.complete(running.popleft()):
                running.append(released.offset)
        self.offset = offset


def report(benchmark: BenchmarkFixture, label: str, per_round: int) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # --benchmark-disable: ran once as a test
        return
    ns = stats.stats.mean / per_round * 1e9
    benchmark.extra_info["ns_per_record"] = round(ns, 1)
    print(f"\n{label}: {ns:.0f} ns per record")


def test_admit_complete_steady_state(benchmark: BenchmarkFixture) -> None:
    state = SteadyState()
    benchmark(state.step, BATCH)
    w = state.window
    assert w.size == IN_FLIGHT  # one in, one out
    assert 0.9 * IN_FLIGHT <= w.in_flight <= IN_FLIGHT  # a few wait behind a busy key
    assert w.safe_cursor <= state.offset
    report(
        benchmark, f"admit+complete, ~{IN_FLIGHT} in flight, {KEYS} keys, {WORKERS} workers", BATCH
    )


def test_admit_complete_null_keys(benchmark: BenchmarkFixture) -> None:
    """The unordered path (null keys): no per-key bookkeeping."""
    window: InFlightWindow[object] = InFlightWindow(0, max_window=4 * IN_FLIGHT)
    running: deque[int] = deque()
    pos = [0]
    for i in range(IN_FLIGHT):
        entry = window.admit(i, None, i % WORKERS, PAYLOAD, 0.0)
        assert entry is not None
        running.append(entry.offset)
    pos[0] = IN_FLIGHT

    def step(n: int) -> None:
        offset = pos[0]
        for _ in range(n):
            entry = window.admit(offset, None, offset % WORKERS, PAYLOAD, 0.0)
            assert entry is not None
            running.append(entry.offset)
            offset += 1
            window.complete(running.popleft())
        pos[0] = offset

    benchmark(step, BATCH)
    assert window.in_flight == IN_FLIGHT
    report(benchmark, "admit+complete, null keys", BATCH)


def fill(n: int, keys: list[bytes | None]) -> InFlightWindow[object]:
    base = 1_000_000  # realistic offsets: not small cached ints
    window: InFlightWindow[object] = InFlightWindow(base, max_window=2 * n, per_worker_capacity=n)
    t0 = 12_345.678
    for i in range(n):
        # a fresh float per record, as a clock reading would be
        entry = window.admit(base + i, keys[i], i % WORKERS, PAYLOAD, t0 + i * 1e-3)
        assert entry is not None
    return window


def bytes_per_entry(n: int, keys: list[bytes | None]) -> float:
    """Bytes allocated by filling an empty window with n in-flight entries, per entry.

    Counts the entries, the window's indexes (dict, deques), offsets and timestamps; not the
    keys (the record's own data, alive in the consumer's message anyway) nor the shared payload.
    """
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        window = fill(n, keys)
        used = tracemalloc.get_traced_memory()[0] - before
        assert window.in_flight == n
    finally:
        tracemalloc.stop()
    return used / n


@pytest.mark.parametrize("keyed", [True, False], ids=["distinct-keys", "null-keys"])
def test_bytes_per_in_flight_entry(keyed: bool) -> None:
    """10,000 in flight: one per key, so 10,000 distinct busy keys (or null keys)."""
    n = 10_000
    keys: list[bytes | None] = [b"key-%d" % i if keyed else None for i in range(n)]
    per_entry = bytes_per_entry(n, keys)
    label = "distinct keys" if keyed else "null keys"
    print(f"\nbytes per in-flight entry ({label}): {per_entry:.0f}")
    assert per_entry < 1024, f"{per_entry:.0f} bytes per in-flight entry (goal: < 1 KiB)"
