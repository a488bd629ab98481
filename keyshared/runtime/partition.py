"""One assigned partition's live state: its window, its phase, and what its workers still hold.

A fresh ``PartitionState`` is made for every assignment of a partition. Results that arrive for
an older incarnation (the partition was lost or revoked meanwhile) find a state whose phase is
``GONE`` and are discarded; this is the generation check that keeps a late result from ever
being committed by the wrong owner.

Three threads touch a state, so its fields come in three groups, each with one guard:

- **dispatcher lock**: the window and everything that decides what runs (phase, running count,
  blocked and parked keys). Only the dispatcher (and the commit snapshot) reads them, under it.
- **poll thread only**: commit bookkeeping and watermarks. Commit callbacks are served inside
  ``consume``, on the poll thread, so these need no lock.
- **thread-safe by themselves**: metrics (prometheus-client locks) and :class:`KeyStats` (its
  own lock), written by workers and read by the poll thread and the ``/hotkeys`` endpoint.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from keyshared.core.hotkeys import SpaceSaving
from keyshared.core.runs import EMPTY_RUNS, OffsetRuns
from keyshared.core.window import Entry, InFlightWindow
from keyshared.runtime.outputs import PartitionOutputs

if TYPE_CHECKING:
    from keyshared.metrics import PartitionMetrics

__all__ = ["Blocked", "KeyStats", "PartitionPhase", "PartitionState"]

Ranked = tuple[bytes, float, float]  # key, weight, error bound


class PartitionPhase(enum.Enum):
    ACTIVE = "active"  # dispatching
    DRAINING = "draining"  # revoked: finishing what runs, dispatching nothing new
    GONE = "gone"  # removed or lost: results are discarded


@dataclass(slots=True)
class Blocked:
    """A record held by the ``block`` policies until an operator releases its key."""

    entry: Entry[Any]
    error: str
    since: float


class KeyStats:
    """The busiest-key and slowest-key sketches of one partition, behind their own lock.

    Why a lock of its own: workers add to the slowest-key sketch concurrently (and the poll
    thread resets both every minute). The sketch is plain data (``core/`` has no threads); two
    unguarded adds, or an add racing a reset, raise ``KeyError``/``IndexError`` inside it, and
    that exception used to escape from the settlement path.
    """

    __slots__ = ("_busiest", "_lock", "_slowest", "since")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busiest = SpaceSaving()
        self._slowest = SpaceSaving()
        self.since = time.monotonic()

    def note_received(self, key: bytes, weight: float) -> None:
        with self._lock:
            self._busiest.add(key, weight)

    def note_received_many(self, keys: Iterable[bytes], weight: float) -> None:
        """A poll batch's sampled keys under one lock acquisition."""
        with self._lock:
            add = self._busiest.add
            for key in keys:
                add(key, weight)

    def note_slow(self, samples: Iterable[tuple[bytes, float]]) -> None:
        with self._lock:
            for key, seconds in samples:
                self._slowest.add(key, seconds)

    def hot_key_share(self) -> float:
        with self._lock:
            return self._busiest.share_of_top()

    def top(self, n: int) -> tuple[list[Ranked], list[Ranked]]:
        """The ``n`` busiest and the ``n`` slowest keys, as ``(key, weight, error)``."""
        with self._lock:
            return self._busiest.top(n), self._slowest.top(n)

    def reset(self, now: float | None = None) -> None:
        """Start a new reporting interval: the sketches describe recent traffic only."""
        with self._lock:
            self._busiest.clear()
            self._slowest.clear()
            self.since = time.monotonic() if now is None else now


@dataclass(eq=False)
class PartitionState:
    topic: str
    partition: int
    # -- thread-safe by themselves
    metrics: PartitionMetrics
    stats: KeyStats = field(default_factory=KeyStats)
    # -- poll thread only
    committed: int | None = None  # last offset committed (or read back at assignment)
    committed_metadata: str = ""  # exactly-once: each transaction names at least what this does
    commit_sent: tuple[int, str] | None = None  # last (cursor, metadata) sent, maybe unconfirmed
    already_done: OffsetRuns = EMPTY_RUNS
    metadata_overflow_logged: bool = False  # the metadata overflow is logged once
    high_watermark: int | None = None
    # The consumer's position when the partition was assigned. librdkafka keeps reporting the
    # previous fetch's position after a partition is assigned again at a lower offset, until
    # the new fetch delivers: that value proves nothing about offsets never delivered.
    stale_position: int | None = None
    # Where the fetch went back to (a recreated topic, a truncated log): the window describes
    # the old log, so nothing of it is committed until the partition starts again (rewinds.py).
    rewound_to: int | None = None
    # The id of the topic whose log the window counts ("": not known), stamped on its commits
    # so that an owner of a recreated topic refuses the old log's cursor (core/offsets.py).
    topic_id: str = ""
    # -- set once at assignment, read by workers
    fencing: Callable[[bytes | None, int], int | None] | None = None  # (key, offset) -> token
    # -- dispatcher lock
    window: InFlightWindow[Any] | None = None  # created at the first record if no commit
    phase: PartitionPhase = PartitionPhase.ACTIVE
    running: int = 0  # entries owned by a worker, a write, a backoff or a hold
    backing_off: dict[int, Entry[Any]] = field(default_factory=dict)  # by id: in retry backoff
    # Ids of entries in flight in the window that will never run (withdrawn from a backoff or
    # a hold, released while draining): not stragglers when the state is removed.
    never_run: set[int] = field(default_factory=set)
    blocked: dict[bytes | None, Blocked] = field(default_factory=dict)  # ordered keys
    blocked_unordered: dict[int, Blocked] = field(default_factory=dict)  # null keys, by offset
    parked: set[bytes | None] = field(default_factory=set)
    # Exactly-once outputs: staged by workers, made ready under the dispatcher lock at finish.
    outputs: PartitionOutputs = field(default_factory=PartitionOutputs)

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def blocked_keys(self) -> list[bytes | None]:
        """Keys held by a block (dispatcher lock): a null key once, however many records."""
        keys = list(self.blocked)
        if self.blocked_unordered and None not in self.blocked:
            keys.append(None)
        return keys

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"
