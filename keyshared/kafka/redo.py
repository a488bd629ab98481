"""The redo of partitions after a failed transaction: as if lost and assigned again.

When a transaction fails and is aborted (or its producer is given up, and a new one settles
it), the windows of its partitions claim records finished whose outputs were discarded. Each of
those partitions still owned here is then redone as a new owner would take it: its window is
dropped, its state is rebuilt from the committed offsets and metadata, and the consumer seeks
there. That reuses the assignment path and needs no memory of which outputs belonged to the
aborted transaction.

A redo whose committed offsets cannot be read (the broker away) stays pending: its partitions
are paused and stateless, and the redo is finished before the next transaction.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition

from keyshared.core.types import TP
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.kafka.seams import MembershipEvents

__all__ = ["Redo"]

log = logging.getLogger(__name__)


class Redo:
    """The partitions being redone, owned for the transactional committer. Poll thread only.

    ::

        redo = Redo(consumer, reset_to_end=False)
        redo.bind(poll_loop)  # its live states and assignment path
        redo.redo([("orders", 3)])  # after the failed transaction was aborted
        if not redo.finish():  # before the next transaction
            ...  # the broker did not answer: commit nothing yet

    :param consumer: the consumer whose partitions are paused, positioned and resumed.
    :param reset_to_end: where a partition without a committed offset starts
        (``auto.offset.reset``): its end, else its beginning.
    """

    def __init__(self, consumer: KafkaConsumer, reset_to_end: bool) -> None:
        self._consumer = consumer
        self._reset_to_end = reset_to_end
        self._events: MembershipEvents | None = None
        # Partitions whose redo could not read their committed offsets yet (broker away):
        # paused, stateless, retried before every transaction.
        self._pending: set[TP] = set()
        self._fencing: dict[TP, Callable[[bytes | None, int], int | None]] = {}

    def bind(self, events: MembershipEvents) -> None:
        """Caller: the committer's ``bind``, before the poll loop runs.
        Affects: which live states and assignment path a redo goes through."""
        self._events = events

    def forget(self) -> None:
        """Caller: the committer, when the active role ends (poll thread).
        Affects: pending redos are dropped (their partitions left with the role)."""
        self._pending.clear()
        self._fencing.clear()

    def leaving(self, partitions: list[TP]) -> None:
        """A revoke: a pending redo of these partitions is dropped, so the revoke's own commit
        (which finishes pending redos first) does not build them again inside the callback.

        Caller: the committer's ``leaving``, before the revoke's final commit (poll thread).
        Affects: the pending partitions and their kept fencing tokens."""
        for tp in partitions:
            self._pending.discard(tp)
            self._fencing.pop(tp, None)

    def redo(self, tps: list[TP] | None = None) -> None:
        """These partitions (default: every live one) as if lost and assigned again: windows
        dropped, states rebuilt from the committed offsets and metadata, the consumer
        positioned there.

        Caller: the committer, after a failed transaction was aborted or its producer given
        up (poll thread).
        Affects: the poll loop's states (through ``lost`` and ``assigned``), the consumer's
        pause, position and resume of these partitions, and the pending set."""
        events = self._events
        if events is None:
            return
        if tps is None:
            tps = list(events.states)
        if tps:
            for tp in tps:  # a coordinator's fencing token stays: the lease did not change
                state = events.states.get(tp)
                if state is not None and state.fencing is not None:
                    self._fencing[tp] = state.fencing
            events.lost(tps)
            self._pending.update(tps)
            with contextlib.suppress(KafkaException):
                self._consumer.pause([TopicPartition(*tp) for tp in tps])
        self.finish()

    def finish(self) -> bool:
        """Rebuild the pending partitions still assigned here; False if the broker did not
        answer (they stay paused and pending).

        Caller: :meth:`redo`, and the committer before every transaction (poll thread): a
        transaction must not start while a partition's redo is half done.
        Affects: as :meth:`redo`; the pending set is emptied once the broker answered."""
        events = self._events
        if not self._pending or events is None:
            return True
        tps: list[TP] = []
        try:
            assignment = {(tp.topic, tp.partition) for tp in self._consumer.assignment()}
            tps = [t for t in self._pending if t in assignment and t not in events.states]
            # A rebalance that assigned a pending partition again has rebuilt and positioned
            # it already; it only needs resuming.
            rebuilt = [t for t in self._pending if t in assignment and t in events.states]
            events.assigned(tps)
        except Exception as exc:
            # Roll back states built before the failure: a retry that found them would take
            # them as rebuilt and leave their partitions paused at a position nobody set.
            partial = [t for t in tps if t in events.states]
            if partial:
                events.lost(partial)
            log.warning("redo: reading the committed offsets failed, retrying: %s", exc)
            return False
        self._pending.clear()
        partitions = [TopicPartition(*t) for t in rebuilt]
        for tp in tps:
            state = events.states.get(tp)
            fencing = self._fencing.pop(tp, None)
            if state is not None and state.fencing is None:
                state.fencing = fencing
            committed = state.committed if state is not None else None
            if committed is None:
                committed = OFFSET_END if self._reset_to_end else OFFSET_BEGINNING
            partitions.append(TopicPartition(tp[0], tp[1]))
            try:
                self._consumer.seek(TopicPartition(tp[0], tp[1], committed))
            except KafkaException as exc:
                log.error("redo: seeking %s[%d] to %s failed: %s", *tp, committed, exc)
        self._fencing.clear()  # of partitions no longer assigned here
        if partitions:
            with contextlib.suppress(KafkaException):
                self._consumer.resume(partitions)
        log.info("redo: %d partition(s) resume from their committed offsets", len(tps))
        return True
