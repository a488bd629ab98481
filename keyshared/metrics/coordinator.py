"""The facade the ZooKeeper coordinator calls, mirroring :class:`ConsumerMetrics`.

Kept beside the consumer facade so the coordinator's series share the ``group, member`` labels
and the dashboard can join them with the consumer's (e.g. lag of a member whose session is
suspended).

Example::

    metrics = CoordinatorMetrics(group="orders", member="orders-1")
    metrics.session("connected")
    metrics.generation(7)
    metrics.owned("orders", ranges=2, slots=21845)
    metrics.pending_drains(1)
    metrics.handover_waited(0.8)
    metrics.holdings("key_shared", {Phase.ACTIVE: 2, Phase.WAITING: 1})
"""

from __future__ import annotations

from collections.abc import Mapping

from keyshared.core.holding import Phase
from keyshared.metrics.families import COORDINATOR_FAMILIES, SESSION_STATES, coordinator

__all__ = ["CoordinatorMetrics"]


class CoordinatorMetrics:
    """All coordinator series of one member.

    :param group: consumer group id.
    :param member: the member id, the same string given to :class:`ConsumerMetrics`.
    """

    def __init__(self, group: str, member: str) -> None:
        self.group = group
        self.member = member
        self._labels = (group, member)
        self._states = {
            state: coordinator.session_state.labels(group, member, state)
            for state in SESSION_STATES
        }
        self._generation = coordinator.generation.labels(group, member)
        self._pending = coordinator.pending_drains.labels(group, member)
        self._handover = coordinator.handover_wait_seconds.labels(group, member)
        self._losses = coordinator.session_losses.labels(group, member)
        self._fencing = coordinator.fencing_events.labels(group, member)
        self._holdings: dict[tuple[str, Phase], int] = {}  # what the gauges were last set to

    def session(self, state: str) -> None:
        """Set the ZooKeeper session state; entering ``lost`` also counts a session loss."""
        if state not in SESSION_STATES:
            raise ValueError(f"session state must be one of {SESSION_STATES}, got {state!r}")
        for name, gauge in self._states.items():
            gauge.set(1 if name == state else 0)
        if state == "lost":
            self._losses.inc()

    def generation(self, generation: int) -> None:
        """Set the assignment generation this member last applied."""
        self._generation.set(generation)

    def owned(self, topic: str, *, ranges: int, slots: int) -> None:
        """Set how many slot ranges, and slots in total, this member owns on ``topic``."""
        coordinator.owned_ranges.labels(*self._labels, topic).set(ranges)
        coordinator.owned_slots.labels(*self._labels, topic).set(slots)

    def pending_drains(self, n: int) -> None:
        """Set how many hand-overs to this member wait for the previous owner's drain."""
        self._pending.set(n)

    def handover_waited(self, seconds: float) -> None:
        """Record how long a hand-over waited for the previous owner."""
        self._handover.observe(seconds)

    def holdings(self, mode: str, counts: Mapping[Phase, int]) -> None:
        """Set how many holdings this member has in each phase; a phase missing from
        ``counts`` reads 0. Called from every tick: a gauge is set only when its count
        changed."""
        for phase in Phase:
            n = counts.get(phase, 0)
            if self._holdings.get((mode, phase)) != n:
                self._holdings[(mode, phase)] = n
                coordinator.holdings.labels(*self._labels, mode, phase.value).set(n)

    def fenced(self) -> None:
        """Count a write or commit refused because this member's lease was stale."""
        self._fencing.inc()

    def close(self) -> None:
        """Remove every coordinator series of this member."""
        selector = {"group": self.group, "member": self.member}
        for family in COORDINATOR_FAMILIES:
            family.remove_by_labels(selector)
