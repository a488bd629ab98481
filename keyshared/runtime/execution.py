"""What happens to one record on a worker: deserialize, run the handler, settle the outcome.

Success frees the key at once. A failure either waits out a backoff (the key stays blocked,
other keys go on) or reaches the poison policy. Every path that writes somewhere first (DLQ,
parked-key state) reports the record finished only from the broker's acknowledgement, so a
record is never counted done before its dead letter is safe.
"""

from __future__ import annotations

import logging
import random
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from keyshared.core.poison import DeserializationError, PoisonPolicy, Retry, decide
from keyshared.core.redaction import REDACTION_INPUT_LIMIT, Redactor, shown_error, shown_key
from keyshared.core.window import Entry
from keyshared.record import Record
from keyshared.runtime.outputs import Output, OutputCheck, output_of
from keyshared.runtime.partition import PartitionPhase, PartitionState
from keyshared.runtime.settlement import LoopSettlement, SettlementBuffer, account
from keyshared.runtime.sinks import DeadLetters, Decoder, Failure, KeyStates
from keyshared.settings import ConsumerOptions

if TYPE_CHECKING:
    from keyshared.runtime.dispatcher import Dispatcher, Work
    from keyshared.runtime.tracing import HandlerTracer

__all__ = ["RecordExecutor"]


log = logging.getLogger(__name__)


def describe(state: PartitionState, entry: Entry[Any], redact: Redactor | None = None) -> str:
    """``topic[partition]@offset key=...`` for a log line; the key bounded and redacted."""
    key = shown_key(entry.payload.key(), redact)
    return f"{state.topic}[{state.partition}]@{entry.offset} key={key}"


class RecordExecutor:
    """Runs entries for the dispatcher; one instance serves every worker.

    ``decode_key`` and ``decode_value`` are the deserializers as the Kafka layer wraps them
    (``keyshared.kafka.deserializers.decoder``, called by the consumer's assembly): the
    executor never reads ``options.key_deserializer`` itself, so one built by hand without
    them hands the handler raw bytes.
    """

    def __init__(
        self,
        options: ConsumerOptions,
        handler: Callable[[Record], Any] | None,
        dispatcher: Dispatcher,
        call_later: Callable[[float, Callable[[], None]], None],
        dlq: DeadLetters,
        keystate: KeyStates | None,
        tracer: HandlerTracer | None = None,
        *,
        decode_key: Decoder | None = None,
        decode_value: Decoder | None = None,
        output_rules: OutputCheck | None = None,
    ) -> None:
        self._options = options
        self._tracer = tracer  # told each failed attempt's fate; the handler is wrapped already
        self._decode_key = decode_key  # None: the raw bytes are handed over
        self._decode_value = decode_value
        self._handler = handler
        self._dispatcher = dispatcher
        self._call_later = call_later
        self._dlq = dlq
        self._keystate = keystate
        self._rng = random.Random()
        self._exactly_once = options.exactly_once
        self._output_rules = output_rules
        self.settlements = SettlementBuffer(dispatcher.finish_many)
        self.loop_settlements = LoopSettlement(dispatcher.finish_many)

    # -- entry points for the two kinds of worker -------------------------------------------

    def run(self, work: Work) -> None:
        """Run one record on a worker thread; its success is settled through the buffer."""
        state, entry = work
        record = self.prepare(state, entry)
        if record is None:
            return
        assert self._handler is not None
        self.settlements.before_handler()
        started = time.perf_counter()
        try:
            self._handler(record)
        except BaseException as exc:
            if record.output is not None:
                output_of(record).seal()
            self.failed(state, entry, exc)
            return
        if record.output is not None:  # exactly-once only: no call per record otherwise
            state.outputs.stage_attempt(entry.offset, output_of(record))
        self.settlements.add(state, entry, time.perf_counter() - started)

    async def run_async(self, work: Work) -> None:
        """Run one record on the event loop; its success is settled with the loop's burst."""
        state, entry = work
        record = self.prepare(state, entry)
        if record is None:
            return
        started = time.perf_counter()
        assert self._handler is not None
        try:
            await self._handler(record)
        except BaseException as exc:
            if record.output is not None:
                output_of(record).seal()
            self.failed(state, entry, exc)
            return
        if record.output is not None:  # exactly-once only: no call per record otherwise
            state.outputs.stage_attempt(entry.offset, output_of(record))
        self.loop_settlements.add(state, entry, time.perf_counter() - started)

    # -- steps ---------------------------------------------------------------------------------

    def prepare(self, state: PartitionState, entry: Entry[Any]) -> Record | None:
        """The record to hand to the handler, or None when the entry was settled otherwise."""
        if state.phase is not PartitionPhase.ACTIVE:
            self._dispatcher.abandon(state, entry)
            return None
        live = self._dispatcher.liveness  # None (no coordinator): nothing to ask per record
        if live is not None and not live():
            # Queued before the member lost touch with its coordinator (a stall, a GC pause):
            # starting it now could overlap its next owner. It waits for dispatch to resume.
            self._dispatcher.defer(state, entry)
            return None
        if entry.ordered and entry.key in state.parked:
            self._dead_letter(state, entry, None, "parked", self._finish_parked_tail)
            return None
        rules = self._output_rules
        if rules is not None and rules.refused:  # exactly-once, after an output's refusal
            refusal = rules.take_refusal(state.topic, state.partition, entry.offset)
            if refusal is not None:  # deterministic: running it again meets the same refusal
                self._terminal(state, entry, refusal, "output_refused")
                return None
        msg = entry.payload
        raw_key = msg.key()
        try:
            key = raw_key if self._decode_key is None else self._decode_key(raw_key, msg)
        except Exception as exc:
            self._terminal(state, entry, DeserializationError("key", exc), "deserialization")
            return None
        try:
            value = msg.value()
            if self._decode_value is not None:
                value = self._decode_value(value, msg)
        except Exception as exc:
            self._terminal(state, entry, DeserializationError("value", exc), "deserialization")
            return None
        if live is not None and not live():
            # Again, right before the handler: a stall while decoding (a
            # SIGSTOP, a GC pause) outlives the session as well as one in the queue does. What
            # is left is the call itself, which fencing tokens cover.
            self._dispatcher.defer(state, entry)
            return None
        ts_type, ts = msg.timestamp()
        headers = msg.headers()
        # Positional on purpose: keyword arguments cost more than the rest of this call.
        return Record(
            key,
            value,
            state.topic,
            state.partition,
            entry.offset,
            tuple(headers) if headers else (),
            ts / 1000.0 if ts_type else None,
            entry.attempt,
            raw_key,
            None if state.fencing is None else state.fencing(raw_key, entry.offset),
            Output(self._output_rules) if self._exactly_once else None,
        )

    def succeeded(self, state: PartitionState, entry: Entry[Any], elapsed: float) -> None:
        """A success settled at once (pull style: no per-thread buffer)."""
        try:
            account([(state, entry, elapsed)])
        finally:
            self._dispatcher.finish(state, entry)

    def failed(self, state: PartitionState, entry: Entry[Any], exc: BaseException) -> None:
        state.metrics.failed.inc()
        if entry.first_failure is None:
            entry.first_failure = time.time()
        decision = decide(entry.attempt, exc, self._options.retry, self._rng)
        if isinstance(decision, Retry):
            state.metrics.retried.inc()
            if self._tracer is not None:
                self._tracer.retried(decision.delay)
            if log.isEnabledFor(logging.DEBUG):
                redact = self._options.redact
                log.debug("retrying %s in %.3fs after %s", describe(state, entry, redact),
                          decision.delay, shown_error(exc, redact))  # fmt: skip
            self._dispatcher.retry_later(state, entry, decision.delay, self._call_later)
            return
        self._terminal(state, entry, exc, decision.reason)

    def _terminal(
        self, state: PartitionState, entry: Entry[Any], exc: BaseException, reason: str
    ) -> None:
        """Apply the poison policy after the last attempt (or at once, for bad input)."""
        if entry.first_failure is None:
            entry.first_failure = time.time()
        policy = self._options.poison_for(state.topic)
        if policy is PoisonPolicy.PARK and not entry.ordered:
            policy = PoisonPolicy.DEAD_LETTER  # an unordered record has no tail to park
        if self._tracer is not None:
            self._tracer.poisoned(policy.value, reason)
        where = describe(state, entry, self._options.redact)
        shown = shown_error(exc, self._options.redact)
        if policy is PoisonPolicy.DROP:
            log.warning(
                "dropping %s after %d attempt(s) (%s): %s", where, entry.attempt, reason, shown
            )
            state.metrics.dropped.inc()
            self._dispatcher.finish(state, entry)
        elif policy is PoisonPolicy.DEAD_LETTER:
            log.warning("dead-lettering %s (%s): %s", where, reason, shown)
            self._dead_letter(state, entry, exc, reason, self._finish_dead_lettered)
        elif policy is PoisonPolicy.BLOCK:
            log.error("blocking key of %s until released (%s): %s", where, reason, shown)
            self._block(state, entry, exc)
        elif policy is PoisonPolicy.BLOCK_AND_DEAD_LETTER:
            log.error("dead-lettering and blocking key of %s (%s): %s", where, reason, shown)
            self._dead_letter(state, entry, exc, reason, lambda s, e: self._block(s, e, exc))
        else:
            log.error(
                "parking key of %s: it and its later records go to the DLQ (%s): %s",
                where,
                reason,
                shown,
            )
            self._dead_letter(state, entry, exc, reason, self._park)

    def _dead_letter(
        self,
        state: PartitionState,
        entry: Entry[Any],
        exc: BaseException | None,
        reason: str,
        then: Callable[[PartitionState, Entry[Any]], None],
    ) -> None:
        failure = Failure(
            entry.attempt,
            exc,
            reason,
            _bounded_traceback(exc),
            entry.first_failure or time.time(),
        )
        if self._exactly_once:
            # The dead letter is an output of its record, and the record goes on (finished,
            # parked, blocked) at once: the letter is durable exactly when the record is
            # committed, in the same transaction.
            state.outputs.stage(entry.offset, [self._dlq.letter(entry.payload, failure)])
            then(state, entry)
            return
        self._dlq.send(
            entry.payload,
            failure,
            still_wanted=lambda: state.phase is not PartitionPhase.GONE,
            on_acked=lambda: then(state, entry),
            on_abandoned=lambda: self._dispatcher.abandon(state, entry),
        )

    def _finish_dead_lettered(self, state: PartitionState, entry: Entry[Any]) -> None:
        state.metrics.dead_lettered.inc()
        self._dispatcher.finish(state, entry)

    def _finish_parked_tail(self, state: PartitionState, entry: Entry[Any]) -> None:
        state.metrics.parked.inc()
        self._dispatcher.finish(state, entry)

    def _block(self, state: PartitionState, entry: Entry[Any], exc: BaseException) -> None:
        if self._options.poison_for(state.topic) is PoisonPolicy.BLOCK_AND_DEAD_LETTER:
            state.metrics.dead_lettered.inc()
        assert self._keystate is not None
        reason = shown_error(exc, self._options.redact)  # bounded: it is a key-state record
        self._keystate.record_blocked(state.topic, state.partition, entry.key, entry.offset, reason)
        self._dispatcher.block(state, entry, reason)

    def _park(self, state: PartitionState, entry: Entry[Any]) -> None:
        """Make the park durable, then let the key's later records follow into the DLQ."""
        state.metrics.dead_lettered.inc()

        def durable() -> None:
            state.metrics.parked.inc()
            self._dispatcher.park(state, entry)

        assert self._keystate is not None
        self._keystate.park(
            state.topic,
            state.partition,
            entry.key,
            entry.offset,
            still_wanted=lambda: state.phase is not PartitionPhase.GONE,
            on_durable=durable,
            on_abandoned=lambda: self._dispatcher.abandon(state, entry),
        )


def _bounded_traceback(exc: BaseException | None) -> str:
    """The traceback's tail (the raise site is last), cut to what the redaction hook may see;
    the DLQ writer redacts it and cuts it again to its header bound."""
    if exc is None:
        return ""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-REDACTION_INPUT_LIMIT:]
