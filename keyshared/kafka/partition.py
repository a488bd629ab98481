"""One assigned partition's live state: its window, its phase, and what its workers still hold.

A fresh ``PartitionState`` is made for every assignment of a partition. Results that arrive for
an older incarnation (the partition was lost or revoked meanwhile) find a state whose phase is
``GONE`` and are discarded; this is the generation check that keeps a late result from ever
being committed by the wrong owner.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from keyshared.core.hotkeys import SpaceSaving
from keyshared.core.window import Entry, InFlightWindow

if TYPE_CHECKING:
    from keyshared.metrics import PartitionMetrics

__all__ = ["Blocked", "PartitionState", "Phase"]


class Phase(enum.Enum):
    ACTIVE = "active"  # dispatching
    DRAINING = "draining"  # revoked: finishing what runs, dispatching nothing new
    GONE = "gone"  # removed or lost: results are discarded


@dataclass(slots=True)
class Blocked:
    """A record held by the ``block`` policies until an operator releases its key."""

    entry: Entry[Any]
    error: str
    since: float


@dataclass(eq=False)
class PartitionState:
    topic: str
    partition: int
    metrics: PartitionMetrics
    committed: int | None = None  # last offset committed (or read back at assignment)
    committed_metadata: str = ""
    commit_sent: tuple[int, str] | None = None  # last (cursor, metadata) sent, maybe unconfirmed
    already_done: frozenset[int] = frozenset()
    window: InFlightWindow[Any] | None = None  # created at the first record if no commit
    phase: Phase = Phase.ACTIVE
    running: int = 0  # entries owned by a worker, a DLQ write or a key-state write
    blocked: dict[bytes | None, Blocked] = field(default_factory=dict)
    parked: set[bytes | None] = field(default_factory=set)
    busiest: SpaceSaving = field(default_factory=SpaceSaving)
    slowest: SpaceSaving = field(default_factory=SpaceSaving)
    high_watermark: int | None = None
    sketches_since: float = field(default_factory=time.monotonic)

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"
