"""Checks, while the demo runs, that each customer's orders are handled one at a time, in order.

The rule checked is keyshared's promise: handling of a key's order ``n`` never starts before
order ``n - 1`` of that key has finished. A retry of the same order (``attempt > 1``) is allowed;
so is an unfinished order started again from its first attempt (a partition moved while it
waited for a retry: its new owner redelivers it), counted as redelivered; an order started again
after it succeeded is a duplicate; anything else is a violation, kept with a message naming the
key and the orders involved.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["DemoVerdict", "OrderVerifier"]

_MAX_KEPT = 20  # violation messages kept for the summary


@dataclass
class DemoVerdict:
    violations: int
    examples: list[str]
    duplicates: int
    succeeded: dict[str, set[int]] = field(default_factory=dict)
    redelivered: int = 0  # unfinished orders started again from attempt 1 after a hand-over


class OrderVerifier:
    """Thread-safe: call :meth:`started` when a handler begins and :meth:`finished` when it ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_started: dict[str, int] = {}
        self._running: set[str] = set()
        self._succeeded: dict[str, set[int]] = {}
        self._violations = 0
        self._examples: list[str] = []
        self._duplicates = 0
        self._redelivered = 0
        self.ok_count = 0

    def started(self, key: str, seq: int, attempt: int) -> None:
        with self._lock:
            if key in self._running:
                self._violate(f"{key}: order {seq} started while an earlier one was still running")
            previous = self._last_started.get(key, -1)
            succeeded = seq in self._succeeded.get(key, ())
            if seq == previous and not succeeded:
                if attempt == 1:
                    # Not finished, started again from its first attempt: a partition moved
                    # while the order waited for a retry, and its new owner redelivered it.
                    # At-least-once, and the order of the key holds.
                    self._redelivered += 1
            elif succeeded:
                self._duplicates += 1
            elif seq != previous + 1:
                self._violate(f"{key}: order {seq} started after order {previous}")
            self._last_started[key] = max(previous, seq)
            self._running.add(key)

    def finished(self, key: str, seq: int, ok: bool) -> None:
        with self._lock:
            self._running.discard(key)
            if ok:
                self._succeeded.setdefault(key, set()).add(seq)
                self.ok_count += 1

    @property
    def in_flight(self) -> int:
        return len(self._running)

    def _violate(self, message: str) -> None:
        self._violations += 1
        if len(self._examples) < _MAX_KEPT:
            self._examples.append(message)

    def verdict(self) -> DemoVerdict:
        with self._lock:
            return DemoVerdict(
                self._violations,
                list(self._examples),
                self._duplicates,
                {key: set(seqs) for key, seqs in self._succeeded.items()},
                self._redelivered,
            )
