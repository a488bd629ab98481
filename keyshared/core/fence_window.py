"""When a fenced transactional producer means another live holder of its ``transactional.id``.

A fence has two causes: another live process initialised the same ``transactional.id``, or the
broker timed out this member's transaction and bumped the epoch itself (seen across a broker
restart). A lone fence is taken like any unusable producer (a new one, a redo): a broker-side
fence must not stop a member. A second fence within :data:`FENCE_WINDOW` is another holder:
re-initialising again would fence it back, and the two would take turns failing each other's
transactions for as long as both run.

A replacement waits :data:`FENCE_SETTLE` after a fence before it is initialised. One foreign
initialisation can fence twice: when ``InitProducerId`` meets an open transaction, Kafka's
transaction coordinator bumps the epoch to abort it (the first fence) and answers
``CONCURRENT_TRANSACTIONS``; the initialiser retries once the abort is written (librdkafka
after 500 ms, the Java client after ``retry.backoff.ms``), and that retry bumps the epoch again
(the coordinator's own comment: "the epoch is bumped a second time"). A replacement initialised
between the two is fenced by the retry, a second fence within the window: a lone foreign
initialisation (a tool, a replica started once by mistake) would stop the member. Initialised
after the retry, the replacement fences the initialiser instead, as a lone fence should. Two
live holders still meet their second fence in turn, the member fenced first stopping first.
"""

from __future__ import annotations

__all__ = ["FENCE_SETTLE", "FENCE_WINDOW", "FenceWindow"]

FENCE_WINDOW = 60.0
"""Seconds: a second fence within it is another live holder of the id."""

FENCE_SETTLE = 2.0
"""Seconds after a fence before a replacement producer is initialised: four times librdkafka's
500 ms retry of an ``InitProducerId`` answered ``CONCURRENT_TRANSACTIONS``."""


class FenceWindow:
    """The fences of one producer identity, by time.

    >>> fences = FenceWindow()
    >>> fences.record(0.0), fences.record(100.0), fences.record(130.0)
    (False, False, True)

    >>> fences.settled(130.5), fences.settled(132.0)
    (False, True)

    :param window: seconds within which a second fence means another live holder.
    :param settle: seconds after a fence before a replacement producer is initialised.
    """

    def __init__(self, window: float = FENCE_WINDOW, settle: float = FENCE_SETTLE) -> None:
        self.window = window
        self.settle = settle
        self._times: list[float] = []  # monotonic times of the fences within the window
        self._last: float | None = None

    def settled(self, now: float) -> bool:
        """True if a replacement producer may be initialised at ``now``: no fence came within
        ``settle`` before it, so an initialiser that fenced this member has had its retry.

        Caller: the transactional committer, before it builds a producer (poll thread).
        Affects: nothing."""
        return self._last is None or now - self._last >= self.settle

    def record(self, now: float) -> bool:
        """A fence at ``now`` (monotonic seconds): True if another one came within the window.

        Caller: the transactional committer, at each fence of its producer (poll thread).
        Affects: the fences remembered (those older than the window are forgotten)."""
        self._times = [t for t in self._times if now - t < self.window] + [now]
        self._last = now
        return len(self._times) >= 2
