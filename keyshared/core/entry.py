"""What the in-flight window hands out and reports: an entry per unfinished record, the record
that holds the cursor, and what a removed window still held.

Kept apart from :mod:`keyshared.core.window` because the adapters (dispatcher, executor,
settlement) pass entries around without needing the window's bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

__all__ = ["CursorBlocker", "Entry", "WindowDrain"]

P = TypeVar("P")


@dataclass(slots=True, eq=False)
class Entry(Generic[P]):
    """One received, unfinished record's bookkeeping. ``payload`` is opaque to the window.

    ``next`` chains the records waiting behind this one's key: a key's queue is a linked list
    through its own entries, so a busy key costs one pointer per waiting record instead of a
    queue object per key (a deque is 600 bytes; at 8 records per key that was most of the
    window's memory).
    """

    offset: int
    key: bytes | None
    worker: int
    payload: P
    received_at: float
    ordered: bool
    in_flight: bool = False
    done: bool = False
    attempt: int = field(default=1)
    first_failure: float | None = None  # wall-clock time of the first failed attempt
    next: Entry[P] | None = None  # the next record of this key, waiting behind this one


class CursorBlocker(NamedTuple):
    """The oldest incomplete record: what keeps the committed offset from moving."""

    offset: int
    key: bytes | None
    age: float
    in_flight: bool


class WindowDrain(NamedTuple, Generic[P]):
    """What a removed partition still held, so the adapter can wait for or discard it."""

    in_flight: list[Entry[P]]
    waiting: list[Entry[P]]
