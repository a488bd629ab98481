"""The slot ranges a ``key_shared`` member holds: their leases, their cursor writers, and the
ranges given up whose leases are not released yet.

They live apart from the member because one rule binds them, and it is easiest to check in one
place: **a range's cursors reach ZooKeeper before anyone reads them**. The member's own re-read
waits for its staged cursors (:meth:`HeldRanges.write_pending`), and a range given up keeps its
lease until its last cursors are written and its stragglers have finished
(:meth:`HeldRanges.give_up`, through :class:`~keyshared.modes.handback.HandBack`, which also
waits for the stragglers and retries a release a lost connection broke). The chaos runs found
both ways of breaking it: re-reading older cursors over one's own progress replays records, and
releasing before the last write hands the next owner an older cursor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from coordinator.cursors import CursorFlush, CursorWriter, flush_together
from coordinator.errors import CoordinatorError
from coordinator.incarnations import Incarnation
from coordinator.leases import Lease, RangeLeases
from keyshared.core.claims import PartitionClaims
from keyshared.core.holding import Phase
from keyshared.core.slots import SlotRange
from keyshared.core.types import TP
from keyshared.modes.handback import HandBack
from keyshared.modes.holdings import Holdings
from keyshared.modes.range_cursors import cursors_for, metadata_budget
from keyshared.runtime.dispatcher import Progress

if TYPE_CHECKING:
    from keyshared.runtime.partition import PartitionState

__all__ = ["HeldRanges", "Progress"]

log = logging.getLogger(__name__)
trace = logging.getLogger("keyshared.trace")  # cursor diagnostics, off unless set to DEBUG

Piece = tuple[SlotRange, int, str]


class HeldRanges:
    """Leases and cursor writers of the ranges held, keyed by range (see the module docstring).

    :param leases: the member's range leases (release goes through them).
    :param writer_of: a new cursor writer for a granted lease.
    :param on_fenced: called for a range whose lease was found gone (a metric).
    :param hand_back: where ranges given up wait for their stragglers and their release.
    :param flush_all: writes several ranges' staged cursors at once (one transaction; see
        :func:`coordinator.cursors.flush_together`).
    :param holdings: the member's holdings, one per range from queued to handed back (a range
        is ACTIVE here from :meth:`add` until it is given up or forgotten).
    """

    def __init__(
        self,
        leases: RangeLeases,
        writer_of: Callable[[Lease], CursorWriter],
        on_fenced: Callable[[], None],
        hand_back: HandBack,
        flush_all: Callable[[list[CursorWriter]], CursorFlush] = flush_together,
        holdings: Holdings | None = None,
    ) -> None:
        self.holdings = Holdings() if holdings is None else holdings
        self._leases = leases
        self._flush_all = flush_all
        self._writer_of = writer_of
        self._on_fenced = on_fenced
        self.hand_back = hand_back
        self.leases: dict[SlotRange, Lease] = {}
        self._writers: dict[SlotRange, CursorWriter] = {}
        self._written: dict[tuple[SlotRange, TP], tuple[list[Piece], Incarnation | None]] = {}
        self._fenced: list[SlotRange] = []  # forgotten since take_fenced(), the session alive

    def __contains__(self, slots: object) -> bool:
        return slots in self.leases

    def __iter__(self) -> Iterator[SlotRange]:
        return iter(list(self.leases))

    def __len__(self) -> int:
        return len(self.leases)

    def tokens(self) -> list[tuple[SlotRange, int]]:
        return [(slots, lease.token) for slots, lease in self.leases.items()]

    def add(self, slots: SlotRange, lease: Lease) -> None:
        """Hold ``slots`` under ``lease``, which was wanted (queued for) in :attr:`holdings`.
        Raises, holding nothing and leaving the range WAITING, if its cursor writer cannot be
        made (ZooKeeper away) or the range was not wanted (a bug in the caller); the holding
        is granted before the lease is kept, so no lease is held here that its holding does
        not show."""
        writer = self._writer_of(lease)
        self.holdings.grant(str(slots))
        self.leases[slots] = lease
        self._writers[slots] = writer

    def draining(self, ranges: list[SlotRange]) -> None:
        """A drain starts that gives ``ranges`` up: nothing new of their keys starts."""
        for slots in ranges:
            if self.holdings.phase(str(slots)) is Phase.ACTIVE:
                self.holdings.drain(str(slots))

    # -- writing cursors --------------------------------------------------------------------

    def write(
        self,
        progress: Sequence[Progress],
        claims: dict[TP, PartitionClaims],
        force: bool,
        suspended: bool,
        incarnations: Mapping[TP, Incarnation] | None = None,
    ) -> tuple[bool, list[SlotRange]]:
        """Stage each held range's cursor in every partition and write them all in one
        transaction, fenced by each range's lease (a range found fenced writes nothing; the
        others are written all the same). While ZooKeeper is away (``suspended``) they stay
        staged.
        Each cursor is stamped with its partition's topic incarnation (``incarnations``: the
        ones the claims were read in).

        :return: whether every write went through, and the ranges found fenced (forgotten
            here; the caller decides what else to stop).
        """
        budget = metadata_budget(len(progress))  # a range's multi must fit ZooKeeper whole
        for slots, writer in list(self._writers.items()):
            for tp, cursor, finished, seen_end in progress:
                computed = cursors_for(slots, claims.get(tp), cursor, finished, seen_end, budget)
                if computed is None:
                    continue  # not read by this window yet: its stored cursors stand
                stamp = None if incarnations is None else incarnations.get(tp)
                if not force and self._written.get((slots, tp)) == (computed, stamp):
                    continue
                writer.stage_pieces(tp[0], tp[1], computed, stamp)
                self._written[(slots, tp)] = (computed, stamp)
                if trace.isEnabledFor(logging.DEBUG):
                    trace.debug(
                        "stage %s %s[%d] %s (window %d-%d, %d finished)",
                        slots,
                        tp[0],
                        tp[1],
                        " ".join(f"{s}@{offset}+{len(meta)}B" for s, offset, meta in computed),
                        cursor,
                        seen_end,
                        len(finished),
                    )
        if suspended:  # written once ZooKeeper answers again
            for slots in self._writers:
                self._forget_written(slots, progress)
            return False, []
        report = self._flush_all(list(self._writers.values()))
        for slots, written in report.written.items():
            trace.debug("wrote %s: %d cursor(s)", slots, written)
        fenced = list(report.fenced)
        for slots, exc in report.failed.items():
            self._forget_written(slots, progress)
            log.warning("writing the cursors of range %s failed: %r", slots, exc)
        ok = not report.fenced and not report.failed
        for slots in fenced:
            self.forget(slots)
        return ok, fenced

    def write_pending(self, suspended: bool) -> None:
        """Write the cursors still staged, those of ranges given up included. A re-read calls
        it first: the stored cursors are older, and starting from them would replay what this
        member has finished. A fenced range is forgotten; raises if the rest cannot be
        written yet."""
        if suspended and self.hand_back.unwritten():
            raise CoordinatorError("ranges given up: cursors not written, ZooKeeper away")
        self.hand_back.write_pending()
        writers = {slots: w for slots, w in self._writers.items() if w.pending}
        if not writers:
            return
        if suspended:
            raise CoordinatorError(f"range {min(writers)}: cursors not written, ZooKeeper away")
        report = self._flush_all(list(writers.values()))
        for slots in report.fenced:
            if self._writers.get(slots) is writers[slots]:
                self.forget(slots)
        for exc in report.failed.values():
            raise exc

    def _forget_written(self, slots: SlotRange, progress: Sequence[Progress] | None = None) -> None:
        """Forget what was staged for ``slots`` (in ``progress``'s partitions; None: all): the
        next write stages it again."""
        if progress is None:
            for key in [key for key in self._written if key[0] == slots]:
                del self._written[key]
            return
        for tp, *_ in progress:
            self._written.pop((slots, tp), None)

    # -- giving ranges up ---------------------------------------------------------------------

    def give_up(
        self,
        slots: SlotRange,
        *,
        drained: bool,
        committed: bool,
        stragglers: list[PartitionState],
    ) -> None:
        """Stop holding ``slots`` after a drain. Its lease is released once its last cursors
        are written and, if the drain timed out, the records still running there finished."""
        lease = self.leases.pop(slots, None)
        writer = self._writers.pop(slots, None)
        self._forget_written(slots)
        if lease is None:
            return  # fenced while draining: the lease is gone already
        if not drained:
            log.warning(
                "range %s: drain timed out; its lease is kept until the records still "
                "running there finish, so the next owner cannot overlap them",
                slots,
            )
        # Cursors a failed flush put back are still waiting even when the drain committed
        # nothing new (a re-read that could not write them read nothing): they go first.
        unwritten = writer is not None and (not committed or writer.pending > 0)
        self.hand_back.add(
            str(slots),
            self._release_of(lease),
            [] if drained else stragglers,
            write=writer.flush if unwritten and writer is not None else None,
            holding=self.holdings.let_go(str(slots)),
        )

    def _release_of(self, lease: Lease) -> Callable[[], None]:
        return lambda: self._leases.release(lease)

    # -- losing ranges ------------------------------------------------------------------------

    def forget(self, slots: SlotRange) -> None:
        """The lease is gone (fenced): stop speaking for the range, write nothing more."""
        log.error("range %s: lease lost (fenced); stopping it without committing", slots)
        self._on_fenced()
        if self.leases.pop(slots, None) is not None:
            self.holdings.let_go(str(slots)).fenced()  # gone: nothing to hand back
        self._writers.pop(slots, None)
        self._forget_written(slots)
        if slots not in self._fenced:
            self._fenced.append(slots)

    def take_fenced(self) -> list[SlotRange]:
        """The ranges forgotten as fenced since the last call (to be queued for again)."""
        fenced, self._fenced = self._fenced, []
        return fenced

    def fenced_waiting(self) -> bool:
        return bool(self._fenced)

    def clear(self) -> None:
        """The session expired: every lease went with it."""
        self._fenced.clear()  # the new session's plan is taken up afresh
        for slots in self.leases:
            self.holdings.let_go(str(slots)).fenced()
        self.leases.clear()
        self._writers.clear()
        self._written.clear()

    def release_all(self, stragglers: list[PartitionState]) -> None:
        """Leaving: give every range up; each lease stands until no call of ``stragglers``
        (the member's partitions) runs any more."""
        for slots, lease in self.leases.items():
            writer = self._writers.get(slots)
            pending = writer is not None and writer.pending
            self.hand_back.add(
                str(slots),
                self._release_of(lease),
                stragglers,
                write=writer.flush if pending and writer is not None else None,
                holding=self.holdings.let_go(str(slots)),
            )
        self.leases.clear()
        self._writers.clear()
