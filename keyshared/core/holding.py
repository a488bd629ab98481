"""The life cycle of one thing a member holds: a partition lease, a slot range, the exclusive lock.

Every coordinated mode holds things that another member waits for, and they share one rule:
**a holding is given back only when no call of its keys runs any more** — after a plan change,
a revoke, a lost session, a shutdown or an exception alike. Kept by each path for itself, the
rule is forgotten by one of them (a SIGTERM past ``drain_timeout`` handing work over while
handlers still run); here it is written once, as a phase and a decision, and the adapters only
do the I/O the decision names.

::

    WAITING ──grant──▶ ACTIVE ──drain──▶ DRAINING ──hand_back──▶ HANDING_BACK ──released──▶ RELEASED
       │                 │                  │                      ▲   (calls still run, or
       └──withdraw───────┴──────────────────┴──────fenced──────────┘    the release failed)

- **WAITING**: queued for the lease or lock. Nothing of its keys may start.
- **ACTIVE**: held; its keys are dispatched and its cursors committed.
- **DRAINING**: nothing new starts; running calls finish and the last cursors are written.
- **HANDING_BACK**: given up, but its znode still stands: calls of its keys still run here
  (stragglers), the last cursors are not written yet, or the release itself failed (a lost
  connection) and is retried. A holding whose lease went with the session (``fenced``) has
  nothing to delete, but is kept here while its stragglers run, so that the member does not
  take the same thing again and run one key twice at once itself.
- **RELEASED**: the znode is gone (or never was ours any more). Final.

Pure: no clock, no I/O, no threads. ``running`` (calls of the holding's keys still running) and
``connected`` (whether ZooKeeper can be written now) are passed in by the adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

__all__ = ["Holding", "HoldingError", "HoldingView", "Phase", "Step", "count_phases"]


class Phase(Enum):
    WAITING = "waiting"
    ACTIVE = "active"
    DRAINING = "draining"
    HANDING_BACK = "handing_back"
    RELEASED = "released"


class Step(Enum):
    """What the adapter must do next for a holding that is handed back."""

    WAIT = "wait"  # calls of its keys still run, ZooKeeper is away, or it is not given up
    WRITE = "write"  # write its last cursors first: releasing before hands over older ones
    RELEASE = "release"  # delete its znode (a lease, the lock, or a queued acquisition)
    FORGET = "forget"  # nothing left to delete (it went with the session): drop it


class HoldingError(RuntimeError):
    """A transition the life cycle does not allow (a bug in the caller)."""


@dataclass
class Holding:
    """One held (or wanted) thing and its phase.

    Example::

        h = Holding("orders@3")
        h.grant()                   # the lease is ours: dispatch
        h.drain()                   # revoked: start nothing more
        h.hand_back(written=True)   # drain over (or timed out): give it back
        h.step(running=1, connected=True)   # Step.WAIT: a straggler still runs
        h.step(running=0, connected=True)   # Step.RELEASE
        h.released()

    :param name: what it is, for logs and errors (``topic@p``, ``lo-hi``, ``active``).
    """

    name: str
    phase: Phase = Phase.WAITING
    alive: bool = True  # False once its znode went with the session or was found gone
    written: bool = True  # its last cursors are durable (nothing to write before a release)

    # -- transitions ----------------------------------------------------------------------------

    def grant(self) -> None:
        """The lease or lock was granted: its keys may run."""
        self._expect(Phase.WAITING, "grant")
        self.phase = Phase.ACTIVE

    def drain(self) -> None:
        """Stop starting calls of its keys; running ones finish."""
        self._expect(Phase.ACTIVE, "drain")
        self.phase = Phase.DRAINING

    def hand_back(self, *, written: bool = True) -> None:
        """Give it up (plan change, revoke, shutdown, exception). From WAITING this withdraws
        a queued acquisition, whose znode must be deleted like a lease.

        :param written: whether its last cursors are durable; if not, :meth:`step` says
            ``WRITE`` before ``RELEASE``.
        """
        if self.phase is Phase.RELEASED:
            raise HoldingError(f"{self.name}: handed back after its release")
        if self.phase is Phase.HANDING_BACK:
            self.written = self.written and written
            return
        self.phase = Phase.HANDING_BACK
        self.written = written

    def fenced(self) -> None:
        """Its znode is gone (session expired, lease deleted): nothing to release, nothing
        to commit; it stays handed back while its stragglers run."""
        if self.phase is Phase.RELEASED:
            return
        self.alive = False
        self.phase = Phase.HANDING_BACK

    def cursors_written(self) -> None:
        self.written = True

    def released(self) -> None:
        """Its znode was deleted (or found gone): final."""
        self._expect(Phase.HANDING_BACK, "release")
        self.phase = Phase.RELEASED

    # -- the rule ------------------------------------------------------------------------------

    def step(self, running: int, connected: bool) -> Step:
        """What to do now, given how many calls of its keys still ``running`` and whether
        ZooKeeper can be written (``connected``). Never ``RELEASE`` while a call runs."""
        if self.phase is not Phase.HANDING_BACK or running > 0:
            return Step.WAIT
        if not self.alive:
            return Step.FORGET
        if not connected:
            return Step.WAIT
        return Step.RELEASE if self.written else Step.WRITE

    @property
    def may_dispatch(self) -> bool:
        """Whether calls of its keys may start."""
        return self.phase is Phase.ACTIVE and self.alive

    @property
    def may_commit(self) -> bool:
        """Whether its cursors may be written (a drain's final commit included)."""
        return self.phase in (Phase.ACTIVE, Phase.DRAINING) and self.alive

    def blocks_retake(self, running: int) -> bool:
        """Whether the member must not start this thing again yet: its old calls still run
        (a new grant would run their keys beside them, in this very member)."""
        return self.phase is Phase.HANDING_BACK and running > 0

    def _expect(self, phase: Phase, what: str) -> None:
        if self.phase is not phase:
            raise HoldingError(f"{self.name}: cannot {what} in phase {self.phase.value}")


@dataclass(frozen=True)
class HoldingView:
    """One holding as an operator sees it, frozen: probes, ``keyshared status`` and metrics
    read these from threads of their own while the poll thread moves the holding on.

    :param name: what it is (``topic@p``, ``lo-hi``, ``active``).
    :param phase: its phase when the view was taken.
    :param since: when it entered that phase (the owner's clock, monotonic seconds).
    :param alive: False once its znode is gone (kept only while its stragglers run).
    """

    name: str
    phase: Phase
    since: float
    alive: bool = True

    def describe(self, now: float) -> dict[str, object]:
        """The JSON form served by ``/readyz``: name, phase, seconds in it, whether its znode
        still stands."""
        return {
            "name": self.name,
            "phase": self.phase.value,
            "age": round(max(0.0, now - self.since), 1),
            "alive": self.alive,
        }


def count_phases(views: Sequence[HoldingView]) -> dict[Phase, int]:
    """How many of ``views`` are in each phase, every phase present (0 included), so that a
    gauge per phase reads 0 rather than keeping its last value when the phase empties."""
    counts = dict.fromkeys(Phase, 0)
    for view in views:
        counts[view.phase] += 1
    return counts
