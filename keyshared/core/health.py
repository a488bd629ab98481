"""Liveness and readiness of one member, decided from what the poll loop last recorded.

Why pure: an orchestrator restarts a pod whose liveness fails and holds back a rollout while
readiness fails, so both answers must be exactly right and explain themselves. Deciding them
from plain timestamps and states (no clocks read, no clients touched) lets every case be tested
directly; the HTTP endpoint only serialises a :class:`ProbeVerdict`.

- **live**: the poll loop finished an iteration within ``wedged_after`` seconds. A slow handler
  never stalls the loop (workers run handlers), so a stale loop means the process is wedged: a
  ``consume`` call that does not return, a deadlock, a callback that never ends.
- **ready**: live, not stopping, a member (joined, with or without partitions) or a healthy
  standby, and no partition whose committed offset has been held back for ``stuck_after``.

Example:

>>> live = liveness(now=100.0, last_iteration=99.9, wedged_after=90.0)
>>> live.ok, live.body()["status"]
(True, 'ok')
>>> stuck = StuckPartition("orders", 3, offset=41, age=75.0)
>>> ready = readiness(
...     now=100.0, last_iteration=99.9, wedged_after=90.0, role=Role.MEMBER,
...     partitions=4, stuck=[stuck], stuck_after=60.0)
>>> ready.ok, ready.reasons
(False, ('orders[3]@41 has held the committed offset back for 75s (stuck_after=60s)',))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from keyshared.core.holding import HoldingView

__all__ = ["ProbeVerdict", "Role", "StuckPartition", "liveness", "readiness", "stuck_partitions"]


class Role(StrEnum):
    """Where a member stands in its group, as far as readiness cares."""

    JOINING = "joining"  # has not yet received its first assignment (or candidacy)
    MEMBER = "member"  # joined: holds partitions or slot ranges (possibly none: idle)
    ACTIVE = "active"  # exclusive mode: the one member that consumes
    STANDBY = "standby"  # exclusive mode: healthy, waiting to take over
    SUSPENDED = "suspended"  # ZooKeeper connection lost, session maybe alive: dispatch paused
    FENCED = "fenced"  # ZooKeeper session lost: everything dropped until a new session
    STOPPING = "stopping"  # stop() was called: draining and committing


_READY_ROLES = frozenset({Role.MEMBER, Role.ACTIVE, Role.STANDBY})
_WHY_NOT: dict[Role, str] = {
    Role.JOINING: "not joined yet: no assignment received from the group",
    Role.SUSPENDED: "ZooKeeper connection lost: dispatch paused until it is back",
    Role.FENCED: "ZooKeeper session lost: fenced until a new session rejoins",
    Role.STOPPING: "stopping: draining in-flight records and committing",
}


@dataclass(frozen=True)
class StuckPartition:
    """A partition whose oldest unfinished record has held the committed offset back."""

    topic: str
    partition: int
    offset: int
    age: float  # seconds since that record was received

    def describe(self, stuck_after: float) -> str:
        return (
            f"{self.topic}[{self.partition}]@{self.offset} has held the committed offset back "
            f"for {self.age:.0f}s (stuck_after={stuck_after:g}s)"
        )


@dataclass(frozen=True)
class ProbeVerdict:
    """An answer to a probe: ``ok`` and, when not, every reason in words."""

    ok: bool
    reasons: tuple[str, ...] = ()
    details: dict[str, object] = field(default_factory=dict)

    def body(self) -> dict[str, object]:
        """The JSON body served with the probe's status code."""
        status = "ok" if self.ok else "fail"
        return {"status": status, "reasons": list(self.reasons), **self.details}


def stuck_partitions(
    blockers: Sequence[StuckPartition], stuck_after: float
) -> list[StuckPartition]:
    """The oldest-unfinished records of each partition that are older than ``stuck_after``."""
    return [b for b in blockers if b.age >= stuck_after]


def liveness(now: float, last_iteration: float, wedged_after: float) -> ProbeVerdict:
    """Live when the poll loop finished an iteration at most ``wedged_after`` seconds ago.

    :param now: the current monotonic time.
    :param last_iteration: monotonic time the loop last went round (or started).
    :param wedged_after: the longest a healthy iteration can take (a revoke's drain included).
    """
    since = max(0.0, now - last_iteration)
    details: dict[str, object] = {
        "poll_loop_idle_seconds": round(since, 3),
        "wedged_after_seconds": wedged_after,
    }
    if since <= wedged_after:
        return ProbeVerdict(True, (), details)
    why = (
        f"poll loop has not iterated for {since:.0f}s (wedged_after={wedged_after:g}s): "
        "the process is wedged"
    )
    return ProbeVerdict(False, (why,), details)


def readiness(
    *,
    now: float,
    last_iteration: float,
    wedged_after: float,
    role: Role,
    partitions: int,
    stuck: Sequence[StuckPartition],
    stuck_after: float,
    holds: Mapping[str, float] | None = None,
    holdings: Sequence[HoldingView] = (),
) -> ProbeVerdict:
    """Ready when live, joined (or a healthy standby), not stopping, nothing is stuck, and
    dispatch is not held for long.

    :param role: where the member stands (see :class:`Role`).
    :param partitions: partitions currently assigned to the member.
    :param stuck: each assigned partition's oldest unfinished record (any age); those older
        than ``stuck_after`` make the member not ready.
    :param holds: the holds on dispatch in place and their ages; one older than
        ``stuck_after`` makes the member not ready (it starts nothing), and each is named.
    :param holdings: what the member wants, holds or hands back, each with its phase: shown
        (name, phase, seconds in it, whether its znode stands), never a reason by itself (a
        lease waiting long for another member's drain is that member's problem).
    """
    reasons = list(liveness(now, last_iteration, wedged_after).reasons)
    if role not in _READY_ROLES:
        reasons.append(_WHY_NOT[role])
    late = stuck_partitions(stuck, stuck_after)
    reasons.extend(s.describe(stuck_after) for s in late)
    holds = holds or {}
    reasons.extend(
        f"dispatch held by {name!r} for {age:.0f}s (stuck_after={stuck_after:g}s): no handler "
        "starts until its owner lifts it"
        for name, age in sorted(holds.items())
        if age >= stuck_after
    )
    details: dict[str, object] = {
        "role": role.value,
        "partitions": partitions,
        "stuck": [
            {"topic": s.topic, "partition": s.partition, "offset": s.offset, "age": round(s.age)}
            for s in late
        ],
        "holds": {name: round(age, 1) for name, age in sorted(holds.items())},
        "holdings": [view.describe(now) for view in holdings],
    }
    return ProbeVerdict(not reasons, tuple(reasons), details)
