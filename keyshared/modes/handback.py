"""Holdings handed back whose znode still stands: one place that waits for their stragglers,
writes their last cursors and releases them, retrying what a lost connection broke.

Every mode gives things back — a partition lease after a revoke, a range after a plan change,
the exclusive lock at shutdown — and each must stay held while a call of its keys still runs
(:mod:`keyshared.core.holding` decides; this module does the I/O), in every mode alike: also
at shutdown, while handlers past ``drain_timeout`` still run. A release that fails on a dropped
connection is retried, never forgotten: the znode left standing would block every other member
for the session's life.

:meth:`HandBack.tick` runs on the poll thread. :meth:`HandBack.leave` hands whatever still
waits to a keeper thread, which ends the ZooKeeper session only once everything is released.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kazoo.exceptions import NoNodeError

from coordinator.errors import Fenced
from keyshared.core.holding import Holding, HoldingView, Step

if TYPE_CHECKING:
    from keyshared.runtime.control import DispatchControl
    from keyshared.runtime.partition import PartitionState

__all__ = ["HandBack", "gone"]

log = logging.getLogger(__name__)

_KEEPER_WAIT = 1.0  # seconds between the keeper's looks while ZooKeeper is away
_KEEPER_LOG_EVERY = 60.0  # seconds between "still waiting" lines of the keeper


@dataclass
class _Entry:
    holding: Holding
    release: Callable[[], None]  # deletes the znode; raises if it could not (retried)
    write: Callable[[], object] | None  # writes its last cursors; raises if it could not
    states: list[PartitionState] = field(default_factory=list)  # where its calls run
    since: float = 0.0  # when it was handed back (the hand-back's clock)


class HandBack:
    """The holdings a member gave back and has not released yet.

    Example::

        hand_back = HandBack(dispatcher, connected=lambda: client.connected)
        hand_back.add("orders@3", lambda: leases.release(lease), states=[state])
        hand_back.tick()            # every loop iteration: releases it once `state` is idle
        hand_back.leave(zk.close)   # at shutdown: a keeper thread finishes the job

    :param dispatcher: whose lock guards the partition states' running counts.
    :param connected: whether ZooKeeper can be written now (not suspended, not lost).
    :param clock: seconds, for how long each holding has been handed back (operators read it
        through :meth:`published`).
    """

    def __init__(
        self,
        dispatcher: DispatchControl,
        connected: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._dispatcher = dispatcher
        self._connected = connected
        self._clock = clock
        self._entries: list[_Entry] = []
        self._published: tuple[HoldingView, ...] = ()
        self._lock = threading.Lock()  # the keeper thread and the poll thread after leave()
        self._retry_pause = threading.Event()  # never set: the keeper's pause between retries

    def __len__(self) -> int:
        return len(self._entries)

    def add(
        self,
        name: str,
        release: Callable[[], None],
        states: list[PartitionState] | None = None,
        *,
        write: Callable[[], object] | None = None,
        alive: bool = True,
        holding: Holding | None = None,
    ) -> None:
        """Give ``name`` back: release it (``release()``) once no call of ``states`` runs and,
        if ``write`` is given, its last cursors are written. ``alive=False``: its znode is gone
        already (fenced); it is only kept while its stragglers run (:meth:`busy`).

        :param holding: the holding of ``name`` the member kept since it wanted it
            (:class:`~keyshared.modes.holdings.Holdings`); a fresh one if not given.
        """
        if holding is None:
            holding = Holding(name)
        elif holding.name != name:
            raise ValueError(f"holding {holding.name!r} handed back as {name!r}")
        if alive:
            holding.hand_back(written=write is None)
        else:
            holding.fenced()
        with self._lock:
            entry = _Entry(holding, release, write, list(states or ()), self._clock())
            self._entries.append(entry)
            self._publish()
        self.tick()

    def fence_all(self) -> None:
        """The session expired: every znode went with it; stragglers stay tracked."""
        with self._lock:
            for entry in self._entries:
                entry.holding.fenced()
            self._publish()
        self.tick()

    def busy(self, name: str) -> bool:
        """Whether calls of an earlier holding of ``name`` still run here: the member must
        not take it again yet (it would run their keys beside them)."""
        with self._lock:
            entries = [e for e in self._entries if e.holding.name == name]
        return any(e.holding.blocks_retake(self._dispatcher.running(e.states)) for e in entries)

    def unwritten(self) -> bool:
        """Whether a holding handed back still has cursors to write."""
        with self._lock:
            return any(e.holding.alive and not e.holding.written for e in self._entries)

    def write_pending(self) -> None:
        """Write the last cursors of every holding handed back, now (a re-read must not start
        from older ones). Raises if one cannot be written yet; one found fenced is dropped."""
        with self._lock:
            for entry in [e for e in self._entries if e.holding.alive and not e.holding.written]:
                assert entry.write is not None
                try:
                    entry.write()
                except Fenced:
                    entry.holding.fenced()
                    self._publish()
                    continue
                entry.holding.cursors_written()

    def tick(self) -> bool:
        """Follow each holding's step; return whether everything is released."""
        with self._lock:
            entries = list(self._entries)
            if not entries:
                return True
            connected = self._connected()
            running = self._dispatcher.running
            steps = [(e, e.holding.step(running(e.states), connected)) for e in entries]
            for entry, step in steps:
                if step is not Step.WAIT and self._follow(entry, step):
                    self._entries.remove(entry)
            if len(self._entries) != len(entries):
                self._publish()
            return not self._entries

    def published(self) -> tuple[HoldingView, ...]:
        """The holdings handed back and not released yet, as of the last change; a frozen copy
        that any thread may read (probes, metrics)."""
        return self._published

    def _publish(self) -> None:
        """Replace the published copy (under the lock: the keeper thread ticks too)."""
        self._published = tuple(
            HoldingView(e.holding.name, e.holding.phase, e.since, e.holding.alive)
            for e in self._entries
        )

    def _follow(self, entry: _Entry, step: Step) -> bool:
        """Do what ``step`` says; True once the entry is done with (released or gone)."""
        holding = entry.holding
        try:
            if step is Step.WRITE:
                assert entry.write is not None
                try:
                    entry.write()  # its last cursors first, or the next owner replays
                except NoNodeError as exc:
                    # A znode the write needs is missing, not the lease (that is Fenced):
                    # retried. Read as "gone", the entry was dropped and the lease stood.
                    log.warning("%s: writing its last cursors failed (%r); retrying",
                                holding.name, exc)  # fmt: skip
                    return False
                holding.cursors_written()
                step = holding.step(0, connected=True)
            if step is Step.RELEASE:
                entry.release()
                log.info("%s: released", holding.name)
        except (Fenced, NoNodeError):
            log.warning("%s: found gone before its release", holding.name)
        except Exception as exc:  # connection lost meanwhile: the next tick tries again
            log.warning("%s: releasing failed (%r); retrying", holding.name, exc)
            return False
        holding.released()
        return True

    def leave(self, close: Callable[[], None]) -> None:
        """Shutdown: release what can be, then ``close()`` the session — on a keeper thread
        once the stragglers have finished, if some still run (or until the process ends and
        its session with it: the next owner never overlaps them)."""
        if self.tick():
            close()
            return
        with self._lock:
            waiting = ", ".join(e.holding.name for e in self._entries)
        log.warning(
            "leaving with handlers still running (or releases to retry) in %s: kept until they "
            "finish, or this process ends and its ZooKeeper session expires",
            waiting,
        )
        threading.Thread(
            target=self._keep, args=(close,), name="keyshared-lease-keeper", daemon=True
        ).start()

    def _keep(self, close: Callable[[], None]) -> None:
        waited = 0.0
        while not self.tick():
            with self._lock:
                states = [s for e in self._entries for s in e.states]
            if not self._dispatcher.wait_drained(states, _KEEPER_WAIT):
                waited += _KEEPER_WAIT
                if waited >= _KEEPER_LOG_EVERY:
                    waited = 0.0
                    log.info("still waiting for handlers in %s before releasing", states)
                continue
            if not self.tick():  # nothing runs, yet the release failed: ZooKeeper is away
                self._retry_pause.wait(_KEEPER_WAIT)
        log.info("stragglers finished after leaving: released")
        close()


def gone() -> None:
    """The release of a holding whose znode went with the session: nothing to delete."""
