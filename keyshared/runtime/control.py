"""The runtime's control seams: what the poll loop and the modes may ask of dispatch.

A mode (``key_shared``, partition leases, ``exclusive``) decides which records run here and
when a held thing may be handed back; the dispatcher owns the windows. These protocols are the
only way between the two, so the dispatcher's lock never leaves the dispatcher.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from keyshared.core.filters import KeyFilter
from keyshared.core.runs import OffsetRuns

if TYPE_CHECKING:
    from keyshared.runtime.partition import PartitionState

__all__ = ["Accepts", "DispatchControl", "KeyFilterOwnership", "Ownership", "Work"]

Accepts = Callable[[bytes | None, int], bool]  # (raw key, offset) -> run it here?
Work = tuple["PartitionState", Any]


class DispatchControl(Protocol):
    """What the modes and the committers may ask of the dispatcher (the only code that
    touches windows, and the only holder of their lock): take and lift named holds on
    dispatch, stop partitions, wait for their drain, fence dispatch by liveness, and read what
    runs and what may be committed, each in one step."""

    def take_hold(self, name: str) -> None: ...

    def lift_hold(self, name: str) -> bool: ...

    def holds(self) -> dict[str, float]: ...

    def running(self, states: Iterable[PartitionState]) -> int: ...

    def stragglers(self, partitions: Iterable[tuple[str, int]]) -> list[PartitionState]: ...

    def progress(
        self, states: Iterable[PartitionState]
    ) -> list[tuple[tuple[str, int], int, OffsetRuns, int]]: ...

    def commit_snapshot(
        self, states: Iterable[PartitionState], take_outputs: bool = False
    ) -> tuple[list[tuple[PartitionState, int, OffsetRuns]], list[tuple[PartitionState, Any]]]: ...

    def return_outputs(self, taken: Iterable[tuple[PartitionState, Any]]) -> None: ...

    def set_liveness(self, live: Callable[[], bool]) -> None: ...

    def stop_dispatching(self, states: list[PartitionState]) -> None: ...

    def wait_drained(
        self,
        states: list[PartitionState],
        timeout: float,
        tick: Callable[[], None] | None = None,
    ) -> bool: ...


class Ownership(Protocol):
    """Which records of a partition this member runs; the rest count as done on arrival.

    Called on the poll thread, under the dispatcher's lock, once per admitted batch: the
    returned predicate (or None for "every record") is then applied per record, so an owner
    check costs nothing where nothing is filtered. It takes the offset as well as the key
    because a range that changed hands resumes at its previous holder's cursor: records of it
    below that cursor are done already, though this member reads them again.
    """

    def admission(self, state: PartitionState) -> Accepts | None: ...


class KeyFilterOwnership:
    """Partition mode: the member owns every record of its partitions its key filters accept."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self._filter = KeyFilter(patterns)
        self._accepts: Accepts | None = None
        if not self._filter.accepts_all:
            accepts_key = self._filter.accepts
            self._accepts = lambda key, _offset: accepts_key(key)

    def admission(self, state: PartitionState) -> Accepts | None:
        return self._accepts
