"""The holdings of one member: one :class:`~keyshared.core.holding.Holding` per thing it wants
or holds, from the moment it is wanted until it is handed back.

A mode member wants a thing (it queues for a lease), is granted it, drains it and gives it
back; before this registry each of those steps lived in a dict of its own (pending, ready,
held), and the phase of a thing was where its entry happened to be. Here the phase is read from
the one object, and the hand-back (:class:`~keyshared.modes.handback.HandBack`) takes that same
object over when it is given up, so that a lease is one holding from WAITING to RELEASED.

Everything here runs on the poll thread, except :meth:`Holdings.published`: after each change
the registry publishes a frozen copy (a tuple of :class:`~keyshared.core.holding.HoldingView`,
replaced whole, never mutated), which ``/readyz``, ``keyshared status`` and the
``keyshared_holdings`` gauge read from their own threads without a lock. The clock is passed in
(operators read ages).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from keyshared.core.holding import Holding, HoldingError, HoldingView, Phase
from keyshared.modes.handback import HandBack

__all__ = ["Holdings", "views"]


class Holdings:
    """The things a member wants (WAITING), holds (ACTIVE) or drains (DRAINING), by name.

    A holding leaves this registry when it is let go (:meth:`let_go`): the hand-back owns it
    from HANDING_BACK to RELEASED; a name let go may be wanted again at once (the hand-back's
    ``busy`` says whether its old calls still run).

    Example::

        holdings = Holdings()
        holdings.want("orders[3]")      # queued for the lease
        holdings.grant("orders[3]")     # granted and dispatching
        holdings.drain("orders[3]")     # revoked: nothing new starts
        hand_back.add("orders[3]", release, states, holding=holdings.let_go("orders[3]"))

    :param clock: seconds, for the age of each phase.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._current: dict[str, tuple[Holding, float]] = {}
        self._published: tuple[HoldingView, ...] = ()

    def __contains__(self, name: object) -> bool:
        return name in self._current

    def __len__(self) -> int:
        return len(self._current)

    def get(self, name: str) -> Holding | None:
        entry = self._current.get(name)
        return None if entry is None else entry[0]

    def phase(self, name: str) -> Phase | None:
        holding = self.get(name)
        return None if holding is None else holding.phase

    def want(self, name: str) -> Holding:
        """Caller: a member queueing for ``name``. Affects: a new WAITING holding; wanting a
        name that is still wanted or held is a bug in the caller."""
        if name in self._current:
            raise HoldingError(f"{name}: wanted while {self._current[name][0].phase.value}")
        holding = Holding(name)
        self._current[name] = (holding, self._clock())
        self._publish()
        return holding

    def grant(self, name: str) -> Holding:
        """Caller: a member whose lease was granted and whose keys now run. Affects: ACTIVE."""
        return self._move(name, Holding.grant)

    def drain(self, name: str) -> Holding:
        """Caller: a revoke, before its drain. Affects: DRAINING (nothing new starts)."""
        return self._move(name, Holding.drain)

    def withdraw(self, name: str) -> None:
        """Caller: an acquisition that ended with no znode of ours left (cancelled, failed, or
        gone with the session). Affects: ``name`` is forgotten; nothing is handed back."""
        entry = self._current.pop(name, None)
        if entry is not None and entry[0].phase is not Phase.WAITING:
            self._current[name] = entry
            raise HoldingError(f"{name}: withdrawn while {entry[0].phase.value}")
        self._publish()

    def let_go(self, name: str) -> Holding:
        """Caller: a member giving ``name`` back (or finding it fenced). Affects: ``name``
        leaves the registry; the holding returned goes to the hand-back, which moves it on to
        HANDING_BACK and RELEASED. A name never wanted here gets a fresh holding."""
        entry = self._current.pop(name, None)
        self._publish()
        return Holding(name) if entry is None else entry[0]

    def snapshot(self) -> list[tuple[str, Phase, float]]:
        """Caller: status reports. Affects: nothing. Each holding's name, phase and the seconds
        since it entered that phase."""
        now = self._clock()
        return [(view.name, view.phase, now - view.since) for view in self._published]

    def published(self) -> tuple[HoldingView, ...]:
        """Caller: any thread (probes, metrics). Affects: nothing. The holdings as of the last
        change, by name; a frozen copy the poll thread replaces whole."""
        return self._published

    def _publish(self) -> None:
        self._published = tuple(
            HoldingView(name, holding.phase, since, holding.alive)
            for name, (holding, since) in sorted(self._current.items())
        )

    def _move(self, name: str, transition: Callable[[Holding], None]) -> Holding:
        entry = self._current.get(name)
        if entry is None:
            raise HoldingError(f"{name}: not wanted here")
        transition(entry[0])
        self._current[name] = (entry[0], self._clock())
        self._publish()
        return entry[0]


def views(holdings: Holdings, hand_back: HandBack) -> tuple[HoldingView, ...]:
    """Caller: any thread (``/readyz``, ``keyshared status``, the ``keyshared_holdings``
    gauge). Affects: nothing. Everything a member holds, from WAITING to HANDING_BACK: its
    registry and what its hand-back has not released yet, each as last published."""
    return holdings.published() + hand_back.published()
