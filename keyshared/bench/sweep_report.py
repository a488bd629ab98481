"""The latency sweep's one table and one chart, from each point's steady-state figures.

Pure apart from writing the files, so the ratio picking and the rendering are unit-tested
without a broker. Each point becomes a :class:`SweepRow`: every contender's steady-state rate
(None when it did not run or failed) and the concurrency it ran at. The ratios the issue asks
for are picked here:

- ``keyshared_vs_best_ordered_peer``: keyshared's better mode (threads or ``async def``) over
  the best per-key-ordered peer (Parallel Consumer at its best ``maxConcurrency``,
  pyrallel-consumer);
- ``keyshared_vs_share_consumer``: the same keyshared figure over the share-group consumer,
  which keeps no order at all (the reference of what Kafka itself offers).

Example::

    row = SweepRow(Point(1_000, 10.0), {KEYSHARED_THREADS: 20_000.0, PARALLEL_CONSUMER: 9_000.0})
    row.ratio_vs_best_ordered_peer()   # 2.22...
    markdown_table([row])              # | keys | L | keyshared threads | ... |
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keyshared.bench.sweep_plan import (
    KEYSHARED_ASYNC,
    KEYSHARED_THREADS,
    PARALLEL_CONSUMER,
    PYRALLEL,
    PYTHON_POOL,
    SHARE_CONSUMER,
    Point,
)

__all__ = ["COLUMNS", "SweepRow", "markdown_table", "write_sweep_chart"]

# Table columns (and chart lines), in order, with their headings.
COLUMNS = (
    (KEYSHARED_THREADS, "keyshared threads"),
    (KEYSHARED_ASYNC, "keyshared async"),
    (PARALLEL_CONSUMER, "Parallel Consumer (KEY)"),
    (PYRALLEL, "pyrallel async"),
    (SHARE_CONSUMER, "share consumer (unordered)"),
    (PYTHON_POOL, "Python thread pool (unordered)"),
)
KEYSHARED = (KEYSHARED_THREADS, KEYSHARED_ASYNC)
ORDERED_PEERS = (PARALLEL_CONSUMER, PYRALLEL)


@dataclass(frozen=True)
class SweepRow:
    """One point's steady-state rates (records/s) and concurrencies, by contender."""

    point: Point
    rates: dict[str, float | None]
    concurrency: dict[str, int] = field(default_factory=dict)

    def _best(self, contenders: Sequence[str]) -> tuple[str, float] | None:
        present = [(c, r) for c in contenders if (r := self.rates.get(c)) is not None]
        return max(present, key=lambda item: item[1]) if present else None

    def keyshared(self) -> tuple[str, float] | None:
        """keyshared's better mode at this point and its rate."""
        return self._best(KEYSHARED)

    def best_ordered_peer(self) -> tuple[str, float] | None:
        """The fastest per-key-ordered peer at this point and its rate."""
        return self._best(ORDERED_PEERS)

    def ratio_vs_best_ordered_peer(self) -> float | None:
        return _ratio(self.keyshared(), self.best_ordered_peer())

    def ratio_vs_share_consumer(self) -> float | None:
        share = self.rates.get(SHARE_CONSUMER)
        return _ratio(self.keyshared(), None if share is None else (SHARE_CONSUMER, share))

    def ratio_threads_vs_python_pool(self) -> float | None:
        """keyshared's threads over a bare Python pool of the same threads: keyshared's own
        cost where CPython, not the order, sets the pace."""
        threads, pool = self.rates.get(KEYSHARED_THREADS), self.rates.get(PYTHON_POOL)
        if threads is None or pool is None:
            return None
        return _ratio((KEYSHARED_THREADS, threads), (PYTHON_POOL, pool))


def _ratio(top: tuple[str, float] | None, bottom: tuple[str, float] | None) -> float | None:
    if top is None or bottom is None or bottom[1] <= 0:
        return None
    return top[1] / bottom[1]


def _rate(row: SweepRow, contender: str) -> str:
    rate = row.rates.get(contender)
    if rate is None:
        return "-"
    concurrency = row.concurrency.get(contender)
    return f"{rate:,.0f} ({concurrency})" if concurrency else f"{rate:,.0f}"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def markdown_table(rows: Sequence[SweepRow]) -> str:
    """One markdown table: a row per point, each contender's steady-state records/s with its
    concurrency in brackets, then the three ratios."""
    headings = ["keys", "L (ms)", *(title for _, title in COLUMNS)]
    headings += [
        "keyshared / best ordered peer",
        "keyshared / share consumer",
        "keyshared threads / Python pool",
    ]
    lines = ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
    for row in rows:
        cells = [f"{row.point.keys:,}", f"{row.point.latency_ms:g}"]
        cells += [_rate(row, contender) for contender, _ in COLUMNS]
        cells += [
            _times(row.ratio_vs_best_ordered_peer()),
            _times(row.ratio_vs_share_consumer()),
            _times(row.ratio_threads_vs_python_pool()),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_sweep_chart(path: Path, rows: Sequence[SweepRow]) -> Path:
    """A PNG: one panel per key count, records/s (log scale) against the handler latency, one
    line per contender (keyshared solid, the peers dashed, the share consumer dotted)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key_counts = sorted({row.point.keys for row in rows})
    width = 5.5 * len(key_counts)
    fig, axes = plt.subplots(1, len(key_counts), figsize=(width, 4.2), squeeze=False)
    for ax, keys in zip(axes[0], key_counts, strict=True):
        mine = [row for row in rows if row.point.keys == keys]
        latencies = [f"{row.point.latency_ms:g}" for row in mine]
        for contender, title in COLUMNS:
            values = [row.rates.get(contender) for row in mine]
            if all(v is None for v in values):
                continue
            ax.plot(
                latencies,
                [float("nan") if v is None else v for v in values],
                marker="o",
                label=title,
                **_style(contender),
            )
        ax.set_yscale("log")
        ax.set_title(f"{keys:,} keys, 8 partitions, per-key order (steady state)", fontsize=9)
        ax.set_xlabel("handler latency (ms)", fontsize=8)
        ax.set_ylabel("records/s", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("keyshared bench sweep", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _style(contender: str) -> dict[str, Any]:
    if contender in KEYSHARED:
        return {"linestyle": "-", "linewidth": 2.0}
    if contender == SHARE_CONSUMER:
        return {"linestyle": ":", "color": "grey"}
    if contender == PYTHON_POOL:
        return {"linestyle": ":", "color": "black"}
    return {"linestyle": "--"}
