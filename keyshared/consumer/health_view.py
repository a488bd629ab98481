"""``/healthz`` and ``/readyz`` of one consumer: what the poll loop recorded, judged by the core.

Why a view and not state of its own: the poll loop already stamps each iteration and samples
every partition's oldest unfinished record once a second (for the gauges and the stuck-record
warning); the membership knows its role. Reading those from the endpoint's thread costs the
loop nothing, and :mod:`keyshared.core.health` decides. A wedged loop stops stamping, so the
probe sees it even though the loop itself can no longer say anything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from keyshared.core.health import ProbeVerdict, Role, liveness, readiness
from keyshared.kafka.poll_loop import PollLoop
from keyshared.settings import ConsumerOptions

__all__ = ["HealthView"]


class HealthView:
    """The probes of one consumer run; both methods are safe from any thread.

    :param loop: the run's poll loop.
    :param options: for ``stuck_after`` and the liveness bound.
    :param stopping: set once ``stop()`` was called: the member is no longer ready.
    :param holds: the dispatcher's holds in place and their ages.
    """

    def __init__(
        self,
        loop: PollLoop,
        options: ConsumerOptions,
        stopping: threading.Event,
        holds: Callable[[], dict[str, float]] = dict,
    ) -> None:
        self._loop = loop
        self._holds = holds
        self._options = options
        self._stopping = stopping

    def liveness(self) -> ProbeVerdict:
        return liveness(time.monotonic(), self._loop.last_iteration, self._options.liveness_bound)

    def readiness(self) -> ProbeVerdict:
        now = time.monotonic()
        oldest, sampled_at = self._loop.oldest_unfinished
        # Ages as of now, not as of the last sample (up to a second old).
        aged = [replace(s, age=s.age + max(0.0, now - sampled_at)) for s in oldest]
        return readiness(
            now=now,
            last_iteration=self._loop.last_iteration,
            wedged_after=self._options.liveness_bound,
            role=self._role(),
            partitions=len(self._loop.states),
            stuck=aged,
            stuck_after=self._options.stuck_after,
            holds=self._holds(),
            holdings=self._loop.membership.holding_views(),
        )

    def _role(self) -> Role:
        if self._stopping.is_set():
            return Role.STOPPING
        return self._loop.membership.role()
