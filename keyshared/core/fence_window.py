"""When a fenced transactional producer means another live holder of its ``transactional.id``.

A fence has two causes: another live process initialised the same ``transactional.id``, or the
broker timed out this member's transaction and bumped the epoch itself (seen across a broker
restart). A lone fence is taken like any unusable producer (a new one, a redo): a broker-side
fence must not stop a member. A second fence within :data:`FENCE_WINDOW` is another holder:
re-initialising again would fence it back, and the two would take turns failing each other's
transactions for as long as both run.
"""

from __future__ import annotations

__all__ = ["FENCE_WINDOW", "FenceWindow"]

FENCE_WINDOW = 60.0
"""Seconds: a second fence within it is another live holder of the id."""


class FenceWindow:
    """The fences of one producer identity, by time.

    >>> fences = FenceWindow()
    >>> fences.record(0.0), fences.record(100.0), fences.record(130.0)
    (False, False, True)

    :param window: seconds within which a second fence means another live holder.
    """

    def __init__(self, window: float = FENCE_WINDOW) -> None:
        self.window = window
        self._times: list[float] = []  # monotonic times of the fences within the window

    def record(self, now: float) -> bool:
        """A fence at ``now`` (monotonic seconds): True if another one came within the window.

        Caller: the transactional committer, at each fence of its producer (poll thread).
        Affects: the fences remembered (those older than the window are forgotten)."""
        self._times = [t for t in self._times if now - t < self.window] + [now]
        return len(self._times) >= 2
