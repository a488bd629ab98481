"""A ``key_shared`` member's re-read, held back while records of its windows still run.

Every change of plan makes a member drain, write its cursors and read again from them. A record
still running then is finished in no cursor: reading again at once would hand it to the new
windows while its first call runs, two calls of one key at once in one process (and its result,
when it came, would be lost). So the re-read waits. The windows stay, dispatching nothing (what
arrives meanwhile is handed back), while their running records finish and the regular commits
write their results; ranges given up meanwhile keep their leases, so their next owners wait
too. Past ``drain_timeout`` the wait is logged, with the partitions it waits for, once.

Nothing here blocks: the poll loop keeps serving commits, metrics and the member's inbox, and
calls :meth:`DeferredRebuild.ready` from ``tick``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from keyshared.core.slots import SlotRange

if TYPE_CHECKING:
    from keyshared.runtime.control import DispatchControl
    from keyshared.runtime.partition import PartitionState

__all__ = ["DeferredRebuild"]

log = logging.getLogger(__name__)


class DeferredRebuild:
    """Whether a re-read must wait, and the ranges to give up once it runs.

    :param dispatcher: the consumer's dispatcher (its lock guards ``running``).
    :param drain_timeout: after this many seconds of waiting the wait is logged.
    :param member: the member's id, for the log.
    """

    def __init__(self, dispatcher: DispatchControl, drain_timeout: float, member: str) -> None:
        self._dispatcher = dispatcher
        self._drain_timeout = drain_timeout
        self._member = member
        self._drop: list[SlotRange] = []
        self._states: list[PartitionState] = []
        self._since: float | None = None
        self._warned = False

    @property
    def waiting(self) -> bool:
        return self._since is not None

    def defer(self, states: list[PartitionState], drop: list[SlotRange]) -> bool:
        """Whether the re-read must wait for records of ``states`` still running; ``drop`` is
        remembered either way (:meth:`take` hands it over). Stops their dispatching."""
        for slots in drop:
            if slots not in self._drop:
                self._drop.append(slots)
        if not states:
            return False
        if self._since is None or [id(s) for s in states] != [id(s) for s in self._states]:
            self._dispatcher.stop_dispatching(states)
            self._states = states
        if not self._dispatcher.running(states):
            return False
        if self._since is None:
            self._since = time.monotonic()
            log.info("member %s reads its ranges again once they finish", self._member)
        return True

    def keep(self, owned: tuple[SlotRange, ...]) -> None:
        """A new plan owns these again: they are not to be given up after all."""
        self._drop = [slots for slots in self._drop if slots not in owned]

    def ready(self) -> bool:
        """Whether a re-read held back may run now (``tick``)."""
        if self._since is None:
            return False
        running = self._dispatcher.running(self._states)
        done = not running
        if not done and not self._warned and time.monotonic() - self._since > self._drain_timeout:
            self._warned = True
            log.warning(
                "member %s: %d record(s) still running in %s after drain_timeout=%gs; it reads "
                "its ranges again once they finish (running them again meanwhile would run "
                "their keys twice at once), and the ranges it gives up keep their leases",
                self._member,
                running,
                ", ".join(str(s) for s in self._states if s.running),
                self._drain_timeout,
            )
        return done

    def take(self) -> list[SlotRange]:
        """The re-read runs: the ranges to give up, and forget the wait."""
        drop, self._drop = self._drop, []
        self._states, self._since, self._warned = [], None, False
        return drop

    def clear(self) -> None:
        """The session expired: nothing is held any more, nothing to give up."""
        self.take()
