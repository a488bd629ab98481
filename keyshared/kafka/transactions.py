"""Exactly-once commits: one Kafka transaction carries the outputs and the safe cursors.

Every commit interval the poll thread takes, in one critical section of the dispatcher lock,
each partition's safe cursor with its finished-offsets metadata *and* the outputs of exactly
the records that snapshot shows finished (see :mod:`keyshared.runtime.outputs`). It then runs one
transaction: produce those outputs, ``send_offsets_to_transaction`` with the consumer's group
metadata (so a member that lost its partitions is refused by the group generation, KIP-447),
``commit_transaction``. A record's outputs are therefore committed exactly when its offset is:
read with ``isolation.level=read_committed``, every input has its outputs exactly once.

A commit whose outputs weigh more than ``max_held_output_bytes`` runs several transactions in
a row, of whole partitions (a partition's outputs only depend on its own offsets), so none
produces more than the bound within ``transaction_timeout``.

Outputs are produced only inside :meth:`TransactionalCommitter._transact`, never between
commits, so an open transaction only ever holds what the offsets in it cover. Outputs of a
record go out with the transaction whose offsets name it. When the finished set above a cursor
outgrows the commit metadata, the transaction also writes the whole set as a side record
(:mod:`keyshared.kafka.finished_sets`) and the metadata links it, so every finished record's
outputs still go out with the next transaction. Without a side topic, outputs the metadata
cannot name wait for a later transaction whose cursor or metadata covers them, and no later
metadata leaves out an offset an earlier committed one named
(:func:`~keyshared.core.offsets.encode_monotone`): the next owner would run that record again
and commit its outputs twice.

A transaction that fails is aborted (or, when the producer is unusable or the outcome is
unknown, a new producer with the same ``transactional.id`` settles it: ``init_transactions``
aborts an open transaction of its id). The windows then claim records finished whose outputs
were discarded, so every partition of that transaction still owned here is redone as if it
had been lost and assigned again (:mod:`keyshared.kafka.redo`); the others kept their outputs
for their next commit.
An output the broker refused for what it is (not for its state) would fail the redo again:
it is pinned to its record first (:mod:`keyshared.kafka.refused_outputs`), which then takes its
poison path instead of running.

A producer fenced twice within a minute is the exception: another live process holds the
``transactional.id``, and a new producer would fence it back. The member stops instead
(:mod:`keyshared.core.fence_window` says when a fence is the second).

Exclusive mode with a coordinator hands one transactional identity from active member to
active member (:mod:`keyshared.kafka.active_role`): the committer then holds a producer only
while the member is active, confirmed by the lock before and after its ``init_transactions``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import (
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from keyshared.core.fence_window import FenceWindow
from keyshared.core.offsets import (
    MAX_RUNS,
    Encoded,
    decode_finished,
    encode_monotone,
    encode_whole,
    encode_within,
    linked_record,
)
from keyshared.core.runs import OffsetRuns
from keyshared.core.types import TP
from keyshared.errors import ConfigurationError, KeySharedError
from keyshared.kafka.active_role import (
    ActiveRole,
    active_role_transactional_id,
    init_refused_for_good,
)
from keyshared.kafka.commits import Committer
from keyshared.kafka.finished_sets import FinishedSets
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.kafka.output_rules import OutputRules
from keyshared.kafka.redo import Redo
from keyshared.kafka.refused_outputs import RefusedOutputs, Source
from keyshared.kafka.seams import MembershipEvents
from keyshared.kafka.transactional_config import default_transactional_id, producer_config
from keyshared.runtime.control import DispatchControl
from keyshared.runtime.outputs import OutputMessage, held_bytes
from keyshared.runtime.partition import PartitionState
from keyshared.settings import ConsumerOptions

__all__ = ["TransactionalCommitter", "transactional_store"]

log = logging.getLogger(__name__)

Taken = list[tuple[PartitionState, list[tuple[int, list[OutputMessage]]]]]
_TXN_TIMEOUT = 30.0  # seconds for a transactional call before the outcome counts as unknown
# librdkafka may ignore send_offsets_to_transaction's timeout when the group coordinator it
# cached went away (a broker restart): the call then never returns (confluentinc/librdkafka
# #5456, #5511). The poll loop waits this long for it, then gives the producer up.
_OFFSETS_WATCHDOG = 15.0
_OFFSETS_CALL_TIMEOUT = 10.0
_METADATA_TIMEOUT = 5.0
_MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's default
_SIDE_RECORD_ROOM = 4096  # a side record's key (topic name) and record framing
_FENCED_CODES = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)


class _ProducerStuck(Exception):
    """A transactional call that never returned: its producer was given up."""


class TransactionalCommitter(Committer):
    """The :class:`~keyshared.kafka.seams.CursorStore` of an exactly-once consumer.

    Built before the poll loop; :meth:`bind` gives it the loop (its live partition states, and
    the assignment path a redo goes through). Poll thread only, like every cursor store.
    """

    def __init__(
        self,
        consumer: KafkaConsumer,
        metrics: Any,
        dispatcher: DispatchControl,
        producer_config: dict[str, Any],
        reset_to_end: bool = False,
        on_fenced: Callable[[], None] | None = None,
        role: bool = False,
        max_transaction_bytes: int = ConsumerOptions.max_held_output_bytes,
        finished_sets: FinishedSets | None = None,
    ) -> None:
        super().__init__(consumer, metrics, dispatcher, self._lookup_state)
        self._max_transaction_bytes = max_transaction_bytes
        self._finished_sets = finished_sets
        # A side record is one message: the producer's limit, less room for key and framing.
        self._side_max_bytes = int(producer_config.get("message.max.bytes", _MESSAGE_MAX_BYTES))
        self._side_max_bytes -= _SIDE_RECORD_ROOM
        self._warned: set[tuple[str, TP]] = set()  # (reason, partition) logged once
        self._producer_config = producer_config
        self._on_fenced = on_fenced
        self.fenced = False  # another live producer took this transactional.id: never again
        self._fences = FenceWindow()
        self._clock = time.monotonic  # the fences' clock (a test moves it)
        self._stuck: list[Any] = []  # producers given up inside a call that never returned
        metrics.producer_fenced(0)
        self.output_rules = OutputRules(
            int(producer_config.get("message.max.bytes", _MESSAGE_MAX_BYTES)),
            lambda topic: consumer.list_topics(topic, timeout=_METADATA_TIMEOUT).topics.get(topic),
        )
        self._refused = RefusedOutputs(self.output_rules, _TXN_TIMEOUT)
        self._events: MembershipEvents | None = None
        self._partitions: dict[str, int] = {}  # DLQ topic -> partition count
        # Exclusive mode with a coordinator (role=True): no producer until serve_role() and
        # activate(); the one of the role is built only while the lock is this member's.
        self._role: ActiveRole | None = None
        self._role_pending = role
        self._active = False
        # None after a failure, until rebuilt
        self._producer: Any = None if role else self._new_producer()
        self._redo = Redo(consumer, reset_to_end)
        self.transactions = 0  # committed transactions (tests and logs)

    _left_out_means = "their outputs wait until a commit can name them or the cursor passes them"

    def _encode(self, state: PartitionState, cursor: int, finished: OffsetRuns) -> Encoded:
        """The whole finished set: in the metadata when it fits, else (longer than the
        metadata's budget) for the transaction to put in a side record and link
        (:meth:`_side_records_ready`, :meth:`FinishedSets.link`). Without a side topic,
        :meth:`_monotone`."""
        encoded = encode_within(cursor, finished, self._max_metadata_bytes)
        if not encoded.left_out:
            return encoded
        if self._finished_sets is None:
            return self._monotone(state, cursor, finished)
        whole = encode_whole(cursor, finished, self._side_max_bytes)
        if whole is not None:
            self._warned.discard(("fragmented", state.tp))  # a later episode logs again
            return Encoded(whole, 0)
        self._once(
            "fragmented",
            state,
            "%s: the finished set above %d is too fragmented for one side record (more than "
            "%d runs or %d bytes): commits keep naming what they named, and the outputs of "
            "records finished since wait for the blocked key",
            cursor,
            MAX_RUNS,
            self._side_max_bytes,
        )
        return self._beyond_side_record(state, cursor, finished)

    def _beyond_side_record(
        self, state: PartitionState, cursor: int, finished: OffsetRuns
    ) -> Encoded:
        """For a finished set no side record will hold: what the last commit named and
        nothing more. A last commit that linked a side record is committed again as it was
        (same link: the record stays its key's latest, so compaction keeps it), at the new
        cursor; one that named everything in its metadata is kept by :meth:`_monotone`. The
        newly finished records' outputs wait until the set shrinks (the blocked key moves
        on) or a restart redoes them, as they waited before side records."""
        previous = state.committed_metadata
        if linked_record(previous) is not None:
            return Encoded(previous, len(finished.from_floor(cursor + 1)))
        return self._monotone(state, cursor, finished)

    def _once(self, reason: str, state: PartitionState, message: str, *args: Any) -> None:
        """Log ``message`` at error the first time ``reason`` holds a partition back in an
        episode: it then holds on every commit interval, and
        ``keyshared_commits_total{outcome="failed"}`` or the held-output gauges say for how
        long. The episode ends when the partition commits normally again."""
        if (reason, state.tp) not in self._warned:
            self._warned.add((reason, state.tp))
            log.error(message, state, *args)

    def _monotone(self, state: PartitionState, cursor: int, finished: OffsetRuns) -> Encoded:
        """Never un-name an offset the partition's last committed metadata named: its
        outputs are committed, and the next owner (or a redo) would run the record again
        if this commit left it out. What no longer fits waits, outputs included."""
        return encode_monotone(cursor, finished, state.committed_metadata, self._max_metadata_bytes)

    def starting_points(
        self, partitions: list[TP], timeout: float
    ) -> dict[TP, tuple[int | None, str]]:
        """The committed offsets and metadata, a linked metadata replaced by the whole
        finished set of its side record: what the last transaction committed outputs for."""
        starts = super().starting_points(partitions, timeout)
        if self._finished_sets is None:
            return starts
        return self._finished_sets.expand(starts, timeout)

    def bind(self, events: MembershipEvents) -> None:
        self._events = events
        self._redo.bind(events)

    def _lookup_state(self, tp: TP) -> PartitionState | None:
        return self._events.states.get(tp) if self._events is not None else None

    def _new_producer(self) -> Any:
        producer = Producer(self._producer_config)
        producer.init_transactions(_TXN_TIMEOUT)
        return producer

    # -- the active role (exclusive mode with a coordinator) -----------------------------------

    def serve_role(self, role: ActiveRole) -> None:
        """Caller: the exclusive member, when it joins (poll thread).
        Affects: the producer exists only between :meth:`activate` and the role's end; a fence
        gives the role up through ``role.fenced()`` instead of counting toward a stop."""
        if not self._role_pending:
            raise RuntimeError("serve_role on a committer built without role=True")
        self._role = role

    def activate(self) -> None:
        """Caller: the exclusive member's activation, with the lock just won (poll thread).
        Affects: a new producer of the role's ``transactional.id``. Its ``init_transactions``
        fences the last holder's producer and settles that one's open transaction (aborted,
        or its commit completed), so the committed offsets read next are final.

        Active only once that succeeded: a failure leaves the committer a standby's, with
        nothing to commit and no producer to rebuild.

        :raises KafkaException: the producer could not be initialised (another try may pass).
        :raises ConfigurationError: the broker refuses the role's ``transactional.id`` for good
            (no member can become active).
        :raises KeySharedError: the lock was no longer this member's after the
            initialisation (nothing of this member can commit).
        """
        self.deactivate()
        if not self._build_role_producer():
            raise KeySharedError("the active role was lost while its producer was initialised")
        self._active = True

    def deactivate(self) -> None:
        """Caller: the exclusive member, at every end of the active role (poll thread).
        Affects: the producer is dropped without committing anything (a transaction it left
        open is aborted by the next holder's initialisation); no producer until the next
        :meth:`activate`; pending redos are forgotten (the partitions left with the role)."""
        self._active = False
        self._redo.forget()
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                producer.purge()

    def _build_role_producer(self) -> bool:
        """A producer of the role, confirmed: True if the lock was this member's before its
        ``init_transactions`` (a member that lost the role must not fence the one that has
        it) and still after it (the one read that makes the producer's commits safe);
        otherwise the role is given up.

        :raises ConfigurationError: the broker refuses the role to every member alike
            (:func:`~keyshared.kafka.active_role.init_refused_for_good`): the run stops,
            instead of each member in turn winning the lock, failing and handing it on.
        """
        assert self._role is not None
        try:
            producer = self._new_producer() if self._role.still_held() else None
        except KafkaException as exc:
            refused = init_refused_for_good(exc, str(self._producer_config["transactional.id"]))
            if refused is not None:
                raise refused from None
            raise
        if producer is None or not self._role.still_held():
            if producer is not None:
                with contextlib.suppress(KafkaException, RuntimeError):
                    producer.purge()
            log.error("the active role is no longer this member's: its transactional "
                      "producer is not used")  # fmt: skip
            self._active = False
            self._role.fenced()
            return False
        self._producer = producer
        return True

    def close(self) -> None:
        if self._producer is None:
            return
        try:
            self._producer.flush(1.0)
        except (KafkaException, RuntimeError) as exc:
            log.debug("closing the transactional producer: %s", exc)

    # -- CursorStore ---------------------------------------------------------------------------

    def commit_async(self, states: Iterable[PartitionState]) -> None:
        """The periodic commit: one transaction, synchronous (it is short: the outputs are
        produced with linger and flushed by the commit)."""
        self._transact(list(states), skip_unchanged=True)

    def commit_sync(self, states: Iterable[PartitionState]) -> bool:
        """Revoke or shutdown: one transaction with these partitions' outputs and cursors.
        Other partitions' outputs stay ready for their own next commit (``take`` is per
        partition), so a cooperative revoke commits only what it hands over.

        True once fenced for good, although nothing was committed: nothing of this member
        can be committed any more, and a caller that retries until it succeeds (the
        shutdown's final commit) would only delay the stop by its drain timeout."""
        if self.fenced or (self._role_pending and not self._active):
            return True  # nothing of this member can be committed (any more, or yet)
        return self._transact(list(states), skip_unchanged=False)

    # -- the transaction -----------------------------------------------------------------------

    def _transact(self, states: list[PartitionState], skip_unchanged: bool) -> bool:
        if not self._ready():
            return False
        taken: Taken = []
        offsets = self._offsets(states, skip_unchanged, taken)
        if not self._dead_letter_topics_ready(states, taken):
            return False
        sided = self._side_records_ready(states, offsets, taken)
        batches = self._batches(states, sided, taken)
        for i, (batch_states, batch_offsets, batch_taken) in enumerate(batches):
            if not self._transact_one(batch_states, batch_offsets, batch_taken):
                rest = batches[i + 1 :]
                if rest:
                    self._dispatcher.return_outputs(t for _, _, later in rest for t in later)
                    for later_states, _, _ in rest:
                        for state in later_states:
                            state.commit_sent = None  # resend on the next try
                return False
        return True

    def _batches(
        self, states: list[PartitionState], offsets: list[TopicPartition], taken: Taken
    ) -> list[tuple[list[PartitionState], list[TopicPartition], Taken]]:
        """One commit's partitions in transactions of at most ``max_held_output_bytes`` of
        outputs each: a backlog let out at once (a DLQ topic created after an outage) would
        otherwise produce for longer than ``transaction_timeout``, abort, be redone, and carry
        the same volume again, never committing. A partition's outputs depend only on its own
        offsets, so whole partitions go together (one over the bound alone), those whose
        outputs waited longest first. Partitions without outputs go with the first."""
        weights = {id(state): held_bytes(items) for state, items in taken}
        if sum(weights.values()) <= self._max_transaction_bytes:
            return [(states, offsets, taken)]
        ordered = sorted(taken, key=lambda t: t[0].outputs.taken_since or math.inf)
        groups: list[Taken] = [[]]
        size = 0
        for state, items in ordered:
            weight = weights[id(state)]
            if groups[-1] and size + weight > self._max_transaction_bytes:
                groups.append([])
                size = 0
            groups[-1].append((state, items))
            size += weight
        group_of = {id(state): i for i, group in enumerate(groups) for state, _ in group}
        batches: list[tuple[list[PartitionState], list[TopicPartition], Taken]] = [
            ([], [], group) for group in groups
        ]
        for state in states:
            batches[group_of.get(id(state), 0)][0].append(state)
        by_tp = {state.tp: group_of.get(id(state), 0) for state in states}
        for tp in offsets:
            batches[by_tp.get((tp.topic, tp.partition), 0)][1].append(tp)
        log.info(
            "%d bytes of outputs to commit exceed max_held_output_bytes (%d): committing them "
            "in %d transactions, by partition",
            sum(weights.values()),
            self._max_transaction_bytes,
            len(batches),
        )
        return batches

    def _transact_one(
        self, states: list[PartitionState], offsets: list[TopicPartition], taken: Taken
    ) -> bool:
        """One transaction: the outputs of ``taken`` that ``offsets`` cover, and ``offsets``."""
        outputs = self._covered(taken)
        if not offsets and not outputs:
            return True
        try:
            self._producer.begin_transaction()
            for source, message in outputs:
                self._produce(message, functools.partial(self._refused.delivered, source))
            if self._finished_sets is not None:
                offsets = self._finished_sets.link(
                    self._producer, offsets, self._max_metadata_bytes, _OFFSETS_CALL_TIMEOUT
                )
            if offsets:
                self._send_offsets(offsets)
            self._commit()
        except Exception as exc:
            # Every failure, not only the client's: an exception left out here would end the
            # poll loop with the transaction open, blocking read_committed readers until it
            # times out.
            self._metrics.commit(False)
            exc = self._serve_reports(exc)
            if not self._stopped_by_fence(exc):
                self._recover(exc, states)
                if self._refused.probe(
                    outputs, self._producer, self._produce, self._stopped_by_fence
                ):
                    self._producer = None  # rebuilt (settling what is open) before the next commit
            return False
        self._metrics.commit(True)
        self.transactions += 1
        by_tp = {(tp.topic, tp.partition): tp for tp in offsets}
        for state in states:
            if state.tp in by_tp:
                state.committed = by_tp[state.tp].offset
                state.committed_metadata = by_tp[state.tp].metadata or ""
                if len(state.committed_metadata) <= self._max_metadata_bytes:
                    self._warned.discard(("held", state.tp))  # a later episode logs again
        return True

    def _serve_reports(self, exc: Exception) -> Exception:
        """Serve the delivery reports of a failed transaction (they pin refused outputs), and
        return the failure to act on: ``exc``, or the fatal error behind it.

        A producer that failed for good (fenced) makes ``produce()`` answer only ``_FATAL``
        ("Unable to produce message: Local: Fatal error"); librdkafka reports the cause once,
        through the next poll, which confluent-kafka raises. Taken for an ordinary failure, a
        fence seen there was never counted, logged or given up on: the member built a new
        producer with the same transactional.id and fenced the other holder back."""
        producer = self._producer
        if producer is None:
            return exc
        try:
            producer.poll(0)
        except KafkaException as cause:
            err = cause.args[0] if cause.args else None
            if _code(exc) == KafkaError._FATAL and isinstance(err, KafkaError) and err.fatal():
                return cause
        except Exception:  # serving reports must not hide the failure itself
            log.debug("serving delivery reports after a failed transaction failed", exc_info=True)
        return exc

    def _ready(self) -> bool:
        """A usable producer and no redo half done; False (retried next time) otherwise.
        Never once fenced for good: a new producer would fence the other holder back; not
        within ``FENCE_SETTLE`` of a first fence (:meth:`FenceWindow.settled`).

        A commit that cannot start for want of a producer or of a redo is a failed commit
        (``keyshared_commits_total{outcome="failed"}``): its outputs and offsets wait. A
        standby of the active role, or a member that gave the role up, has nothing to commit."""
        if self.fenced:
            return False
        if self._producer is None:
            if self._role_pending and not self._active:
                return False  # a standby, or a role given up: nothing to commit
            try:
                if self._role is not None:
                    if not self._build_role_producer():
                        return False
                elif not self._fences.settled(self._clock()):
                    # The initialisation that fenced the last producer may not have had its
                    # retry yet, which would fence a replacement built now a second time.
                    self._metrics.commit(False)
                    return False
                else:
                    self._producer = self._new_producer()
            except KafkaException as exc:
                self._metrics.commit(False)
                log.warning("transactional producer not ready yet: %s", exc)
                return False
        if not self._redo.finish():
            self._metrics.commit(False)
            return False
        return True

    def _dead_letter_topics_ready(self, states: list[PartitionState], taken: Taken) -> bool:
        """Hold the commit (cursor and outputs), as the at-least-once DLQ writer holds the
        cursor, while a DLQ topic cannot be written: a transaction would fail and its redo
        would only meet the same poison record again."""
        topics = {
            m.topic
            for _, items in taken
            for _, messages in items
            for m in messages
            if m.source_partition is not None
        }
        for topic in topics:
            try:
                self._partition_count(topic)
            except (KafkaException, LookupError) as exc:
                self._metrics.dlq_write_failed(topic)
                self._metrics.commit(False)
                log.error("dead letters to %r cannot be written, holding the commit: %s",
                          topic, exc)  # fmt: skip
                self._dispatcher.return_outputs(taken)
                for state in states:
                    state.commit_sent = None  # resend on the next try
                return False
        return True

    def _side_records_ready(
        self, states: list[PartitionState], offsets: list[TopicPartition], taken: Taken
    ) -> list[TopicPartition]:
        """The commits to send, once the side topic their overflowing finished sets need is
        there. Without it (missing, or refusing side records), each overflowing partition
        names what its last commit named and what else fits (:meth:`_beyond_side_record`):
        its other outputs wait. A partition whose last commit cannot be named again in the
        metadata (a whole set read back from a side record) keeps that commit: it is left out
        of this transaction, its outputs go back to wait, and the other partitions commit.

        Caller: :meth:`_transact`, after the offsets and outputs are taken.
        Affects: ``taken`` (a held partition's outputs leave it) and ``commit_sent``."""
        budget = self._max_metadata_bytes
        if all(len(tp.metadata or "") <= budget for tp in offsets):
            return offsets
        if self._finished_sets is not None and self._finished_sets.ready():
            return offsets
        by_tp = {state.tp: state for state in states}
        result: list[TopicPartition] = []
        held: list[PartitionState] = []
        unchanged: list[PartitionState] = []
        for tp in offsets:
            state = by_tp.get((tp.topic, tp.partition))
            if len(tp.metadata or "") <= budget or state is None:
                result.append(tp)
                continue
            finished = decode_finished(tp.offset, tp.metadata)
            text = self._beyond_side_record(state, tp.offset, finished).text
            if len(text) > budget:
                held.append(state)
            elif (tp.offset, text) == (state.committed, state.committed_metadata):
                unchanged.append(state)  # committed already: nothing to send, nothing failed
            else:
                state.commit_sent = (tp.offset, text)
                result.append(TopicPartition(tp.topic, tp.partition, tp.offset, metadata=text))
        if held or unchanged:
            self._leave_out([*held, *unchanged], taken)
        if held:
            self._metrics.commit(False)
        for state in held:
            self._once(
                "held",
                state,
                "%s: the finished set outgrew the commit metadata again and the finished-set "
                "topic cannot be written: holding the partition's commit (its last one stands)",
            )
        return result

    def _leave_out(self, states: list[PartitionState], taken: Taken) -> None:
        """Leave ``states`` out of this transaction: their last commit stands, their outputs
        wait in the dispatcher, and the next commit tries them again."""
        ids = {id(state) for state in states}
        self._dispatcher.return_outputs([t for t in taken if id(t[0]) in ids])
        taken[:] = [t for t in taken if id(t[0]) not in ids]
        for state in states:
            state.commit_sent = None

    def _covered(self, taken: Taken) -> list[tuple[Source, OutputMessage]]:
        """The outputs whose records the offsets about to be committed mark finished, in
        finish order, each with its record; the rest (metadata overflow) go back to wait for
        a later commit."""
        outputs: list[tuple[Source, OutputMessage]] = []
        for state, items in taken:
            cursor, metadata = state.commit_sent or (0, "")
            runs = None
            kept = []
            for offset, messages in items:
                if offset >= cursor:
                    if runs is None:
                        runs = decode_finished(cursor, metadata)
                    if offset not in runs:
                        kept.append((offset, messages))
                        continue
                source = (state.topic, state.partition, offset)
                outputs.extend((source, message) for message in messages)
            if kept:
                self._dispatcher.return_outputs([(state, kept)])
        return outputs

    def _produce(self, message: OutputMessage, on_delivery: Callable[..., None] | None) -> None:
        extra: dict[str, Any] = {}
        if message.source_partition is not None:
            extra["partition"] = message.source_partition % self._partition_count(message.topic)
        elif on_delivery is not None:  # a dead letter is never suspected: the DLQ has its hold
            extra["on_delivery"] = on_delivery
        if message.headers is not None:
            extra["headers"] = message.headers
        while True:
            try:
                self._producer.produce(message.topic, message.value, message.key, **extra)
                return
            except BufferError:
                self._producer.poll(0.05)  # local queue full: let it drain into the broker

    def _send_offsets(self, offsets: list[TopicPartition]) -> None:
        """``send_offsets_to_transaction``, bounded by the poll loop itself: a call librdkafka
        never returns (its timeout ignored while a stale group coordinator is cached) would
        stop the poll loop, and so every commit and every stop, for good. Past the watchdog
        the producer is given up: kept referenced (its stuck call must not meet a destroyed
        client) and never touched again; the next transaction's new producer fences it, and
        the failure is recovered like any unusable producer (abort by fencing, redo)."""
        producer = self._producer
        metadata = self._consumer.consumer_group_metadata()
        outcome: list[BaseException | None] = []

        def call() -> None:
            try:
                producer.send_offsets_to_transaction(offsets, metadata, _OFFSETS_CALL_TIMEOUT)
            except BaseException as exc:  # handed to the poll thread, raised there
                outcome.append(exc)
            else:
                outcome.append(None)

        worker = threading.Thread(target=call, name="keyshared-txn-offsets", daemon=True)
        worker.start()
        worker.join(_OFFSETS_WATCHDOG)
        if not outcome:
            self._stuck.append(producer)
            self._producer = None
            self._metrics.commit(False)
            log.error(
                "send_offsets_to_transaction did not return within %gs (a librdkafka call "
                "that ignores its timeout while the group coordinator it cached is gone): "
                "giving the producer up; a new one fences it and the partitions are redone",
                _OFFSETS_WATCHDOG,
            )
            raise _ProducerStuck()
        if outcome[0] is not None:
            raise outcome[0]

    def _partition_count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            meta = self._producer.list_topics(topic, timeout=_METADATA_TIMEOUT).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise LookupError(f"DLQ topic {topic!r} is unavailable; create it")
            count = self._partitions[topic] = len(meta.partitions)
        return count

    def _stopped_by_fence(self, exc: BaseException) -> bool:
        """True if ``exc`` is a fence that stopped this member (or gave its role up)."""
        return _fenced(exc) and self._fenced_twice(exc)

    def _fenced_twice(self, exc: BaseException) -> bool:
        """The producer was fenced: True if this member stopped for it.

        The first fence is taken like any unusable producer (a new one, a redo: the new one
        after :data:`~keyshared.core.fence_window.FENCE_SETTLE`); a second one
        within the window (:class:`~keyshared.core.fence_window.FenceWindow`) is another live
        holder of the ``transactional.id``, which a new producer would fence back. The member
        then stops committing and stops, and says why. With the active role, any fence gives
        the role up instead."""
        txn_id = self._producer_config.get("transactional.id")
        self._metrics.producer_fenced()
        if self._role is not None:
            log.error(
                "the producer of the active role (transactional.id %r) was fenced (%s): "
                "another member became active, or the broker timed out this member's "
                "transaction. Giving the role up; its uncommitted records are redone by the "
                "next active member.",
                txn_id,
                exc,
            )
            self.deactivate()
            self._role.fenced()
            return True
        if not self._fences.record(self._clock()):
            log.error(
                "the transactional producer was fenced (%s): another process initialised "
                "transactional.id %r, or the broker timed out this member's transaction. A new "
                "producer takes over; a second fence within %gs stops this member.",
                exc,
                txn_id,
                self._fences.window,
            )
            return False
        self.fenced = True
        log.error(
            "the transactional producer was fenced again (%s): another live process uses "
            "transactional.id %r. This member commits nothing more and stops; its uncommitted "
            "records are redone by their next owner. Give every replica its own "
            "transactional_id (or none: the default is unique per run).",
            exc,
            txn_id,
        )
        with contextlib.suppress(KafkaException, RuntimeError):
            self._producer.purge()
        self._producer = None
        if self._on_fenced is not None:
            self._on_fenced()
        return True

    def _commit(self) -> None:
        """commit_transaction, repeated while librdkafka calls the error retriable (the
        repeat is how it asks to learn the outcome)."""
        deadline = time.monotonic() + _TXN_TIMEOUT
        while True:
            try:
                self._producer.commit_transaction(_TXN_TIMEOUT)
                return
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                retriable = isinstance(err, KafkaError) and err.retriable()
                if not retriable or time.monotonic() >= deadline:
                    raise

    def _recover(self, exc: BaseException, states: list[PartitionState]) -> None:
        """Abort (or settle through a new producer), then redo the partitions of the failed
        transaction that are still here: their windows count records finished whose outputs
        were just discarded. Partitions outside it kept their outputs."""
        err = exc.args[0] if exc.args else None
        fenced = isinstance(err, KafkaError) and err.code() in (
            KafkaError._FENCED,
            KafkaError.PRODUCER_FENCED,
            KafkaError.INVALID_PRODUCER_EPOCH,
        )
        log.warning(
            "transaction failed (%s): aborting it and redoing the records since the last commit%s",
            exc,
            "; the producer was fenced" if fenced else "",
        )
        aborted = False
        if isinstance(err, KafkaError) and err.txn_requires_abort() and not err.fatal():
            try:
                self._producer.abort_transaction(_TXN_TIMEOUT)
                aborted = True
            except KafkaException as abort_exc:
                log.warning("abort_transaction failed: %s", abort_exc)
        if not aborted:
            # Unusable, or the outcome unknown: a new producer of the same transactional.id
            # settles whatever this one left open (init_transactions aborts it) before the next
            # transaction; the committed offsets read meanwhile are stable ones (read_committed
            # consumers wait out pending transactional offsets, KIP-447).
            if self._producer is not None:  # None: given up inside a call (_send_offsets)
                with contextlib.suppress(KafkaException, RuntimeError):
                    self._producer.purge()
            self._producer = None
        live = self._events.states if self._events is not None else {}
        self._redo.redo([s.tp for s in states if live.get(s.tp) is s])

    def leaving(self, partitions: list[TP]) -> None:
        """A revoke: a pending redo of these partitions is dropped (:meth:`Redo.leaving`)."""
        self._redo.leaving(partitions)


def _code(exc: BaseException) -> int | None:
    """The error code a client call failed with (None: not a client error)."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


def _fenced(exc: BaseException) -> bool:
    """Another producer with this transactional.id was initialised after ours (librdkafka
    reports the fence as a fatal error; a broker-side transaction timeout is not one)."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if not isinstance(err, KafkaError):
        return False
    return err.code() in _FENCED_CODES or (
        err.code() == KafkaError.INVALID_PRODUCER_EPOCH and err.fatal()
    )


def transactional_store(
    consumer: KafkaConsumer,
    kafka_config: dict[str, Any],
    options: ConsumerOptions,
    metrics: Any,
    dispatcher: DispatchControl,
    on_fenced: Callable[[], None] | None = None,
    active_role: bool = False,
) -> TransactionalCommitter | None:
    """The exactly-once cursor store, or None for an at-least-once consumer.

    :param active_role: exclusive mode with a coordinator: the transactional identity is the
        group's active role (:class:`ActiveRole`), not the member's.

    :param on_fenced: called once the producer is fenced (another live process took its
        ``transactional.id``): the run should stop.
    """
    if not options.exactly_once:
        return None
    group = str(kafka_config["group.id"])
    if active_role:
        if options.transactional_id is not None:
            raise ConfigurationError(
                "transactional_id",
                "exclusive mode with a coordinator uses one transactional.id for the active "
                f"role ({active_role_transactional_id(group)!r}), shared by every member so "
                "that each new active member fences the last one at the broker; leave "
                "transactional_id unset",
            )
        txn_id = active_role_transactional_id(group)
    else:
        txn_id = options.transactional_id or default_transactional_id(
            group, str(kafka_config.get("client.id", ""))
        )
    reset = str(kafka_config.get("auto.offset.reset", "latest")).lower()
    return TransactionalCommitter(
        consumer,
        metrics,
        dispatcher,
        producer_config(kafka_config, txn_id, options.transaction_timeout),
        reset_to_end=reset in ("latest", "largest", "end"),
        on_fenced=on_fenced,
        role=active_role,
        max_transaction_bytes=options.max_held_output_bytes,
        finished_sets=FinishedSets(kafka_config, group),
    )
