"""What the latency sweep measures at each point: the contenders, their concurrency, their sizes.

The sweep crosses key counts (1,000 and 10,000) with handler latencies (0, 1, 10, 100 ms) on
one 8-partition topic per key count. Each contender runs at the concurrency a user would pick
for that latency (:data:`THREADS`, :data:`ASYNC_CONCURRENCY`), and reads only as many records
as keep it busy for about ``seconds``: at 100 ms the ordered bound with 1,000 keys is
10,000 records/s, at 0 ms nothing but the CPU bounds a contender, so one record count for all
would make the slow points last minutes or the fast ones milliseconds. A contender's expected
rate is the lower of its bound (``min(concurrency, keys) / L``, or ``concurrency / L`` when it
ignores keys) and its CPU ceiling on a small machine (:data:`CEILINGS`, from
docs/benchmarks.md); the guess sizes the run only, it is never reported.

Example::

    plan = sweep_plan(quick=False)
    plan.points[0].latency_ms, plan.points[0].keys     # 0.0, 1000
    records_for(KEYSHARED_THREADS, 16, 1_000, 0.0, 8.0)  # 60,000 * 8 s = 480,000
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ASYNC_CONCURRENCY",
    "CEILINGS",
    "KEYSHARED_ASYNC",
    "KEYSHARED_THREADS",
    "KEY_COUNTS",
    "LATENCIES_MS",
    "MAX_RECORDS",
    "MIN_RECORDS",
    "PARALLEL_CONSUMER",
    "PARTITIONS",
    "PYRALLEL",
    "PYTHON_POOL",
    "SHARE_CONSUMER",
    "THREADS",
    "Plan",
    "Point",
    "expected_rate",
    "pc_concurrencies",
    "records_for",
    "sweep_plan",
    "threads_for",
]

PARTITIONS = 8
KEY_COUNTS = (1_000, 10_000)
LATENCIES_MS = (0.0, 1.0, 10.0, 100.0)

# Threads a user would give a sync handler of that latency: enough to cover it, not more (a
# no-op gains nothing from threads but switching). 1,000 at 100 ms is what 10,000 records/s
# (1,000 keys) needs.
THREADS = {0.0: 16, 1.0: 64, 10.0: 256, 100.0: 1_000}
ASYNC_CONCURRENCY = 1_000  # coroutines are cheap: keyshared's async default

KEYSHARED_THREADS = "keyshared_threads"
KEYSHARED_ASYNC = "keyshared_async"
PARALLEL_CONSUMER = "parallel_consumer"
PYRALLEL = "pyrallel_async"
SHARE_CONSUMER = "share_consumer"
# A bare Python thread pool at keyshared's thread count: no order, no safe commit. Not a peer:
# the ceiling a sync handler meets in CPython on this machine, so a gap to a JVM peer can be
# told apart from keyshared's own cost (keyshared threads over this is that cost).
PYTHON_POOL = "python_thread_pool"

ORDERED = frozenset({KEYSHARED_THREADS, KEYSHARED_ASYNC, PARALLEL_CONSUMER, PYRALLEL})

# records/s a contender reaches on two busy cores with a no-op handler (docs/benchmarks.md:
# noop, async_io, the peers); for sizing only.
CEILINGS = {
    KEYSHARED_THREADS: 60_000.0,
    KEYSHARED_ASYNC: 35_000.0,
    PARALLEL_CONSUMER: 30_000.0,
    PYRALLEL: 2_500.0,
    SHARE_CONSUMER: 40_000.0,
    PYTHON_POOL: 60_000.0,
}
MIN_RECORDS = 1_000  # fewer and the steady window is a handful of marks
MAX_RECORDS = 600_000


@dataclass(frozen=True)
class Point:
    """One point of the sweep: ``keys`` keys on the sweep's topic, a handler of ``latency_ms``."""

    keys: int
    latency_ms: float

    @property
    def handler_s(self) -> float:
        return self.latency_ms / 1000

    @property
    def threads(self) -> int:
        return threads_for(self.latency_ms)

    @property
    def name(self) -> str:
        return f"{self.keys}-keys-{self.latency_ms:g}ms"


@dataclass(frozen=True)
class Plan:
    """The points, in run order (key count, then latency), and the seconds each run aims at."""

    points: tuple[Point, ...]
    seconds: float


def threads_for(latency_ms: float) -> int:
    """The thread count of :data:`THREADS` for ``latency_ms`` (the next latency up, if none).

    :raises ValueError: a latency above every planned one or below 0.
    """
    if latency_ms < 0:
        raise ValueError(f"handler latency must be >= 0 ms, got {latency_ms:g}")
    for planned in sorted(THREADS):
        if latency_ms <= planned:
            return THREADS[planned]
    raise ValueError(f"no thread count planned for {latency_ms:g} ms (at most {max(THREADS):g})")


def sweep_plan(quick: bool, latencies_ms: tuple[float, ...] = LATENCIES_MS) -> Plan:
    """Every point of the sweep; ``quick``: 1.5 s per run instead of 8, so the whole sweep fits
    in a few minutes (figures that only show the shape, not steady state)."""
    points = tuple(Point(keys, latency) for keys in KEY_COUNTS for latency in latencies_ms)
    return Plan(points, 1.5 if quick else 8.0)


def expected_rate(contender: str, concurrency: int, keys: int, handler_s: float) -> float:
    """The rate a run is sized for: the lower of the bound and the contender's CPU ceiling.

    :raises ValueError: an unknown contender, or concurrency < 1.
    """
    if contender not in CEILINGS:
        raise ValueError(f"unknown sweep contender {contender!r}; known: {', '.join(CEILINGS)}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    ceiling = CEILINGS[contender]
    if handler_s <= 0:
        return ceiling
    slots = min(concurrency, keys) if contender in ORDERED else concurrency
    return min(ceiling, slots / handler_s)


def records_for(
    contender: str, concurrency: int, keys: int, handler_s: float, seconds: float
) -> int:
    """Records a run reads so that it lasts about ``seconds``, within
    [:data:`MIN_RECORDS`, :data:`MAX_RECORDS`]."""
    wanted = round(expected_rate(contender, concurrency, keys, handler_s) * seconds)
    return max(MIN_RECORDS, min(MAX_RECORDS, wanted))


def pc_concurrencies(threads: int) -> tuple[int, ...]:
    """The ``maxConcurrency`` values Parallel Consumer is tried at, its best one reported: the
    thread count a user would pick, and :data:`ASYNC_CONCURRENCY` (a JVM thread is cheap)."""
    return tuple(sorted({threads, ASYNC_CONCURRENCY}))
