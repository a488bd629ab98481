"""Outputs the broker refuses for what they are, pinned to the records that made them.

An output refused for its size, its form or its topic (not for the broker's state) would fail
every redo of its transaction again, and the partition would never commit. The broker refuses
a whole batch for one bad record, so a refusal in a delivery report makes its record only a
suspect. After the failed transaction is aborted, each suspect's outputs are produced alone in
a transaction that is always aborted (read_committed readers never see it); a record whose own
outputs are refused is pinned (:meth:`~keyshared.kafka.output_rules.OutputRules.pin`) and takes
its poison path when it is redone, instead of running into the same refusal at every commit
interval. The other suspects run again as usual.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from keyshared.kafka.output_rules import OutputRules
from keyshared.runtime.outputs import OutputMessage

__all__ = ["RefusedOutputs", "Source"]

log = logging.getLogger(__name__)

Source = tuple[str, int, int]  # the record an output belongs to: topic, partition, offset
Produce = Callable[[OutputMessage, Callable[..., None] | None], None]
_MAX_PROBES = 100  # suspect records probed after one failed transaction (the rest: next time)
# Delivery errors caused by the message or its topic, not by the broker's state: the same
# output is refused again on every redo. (_INVALID_DIFFERENT_RECORD, a neighbour's fault in the
# same batch, is not among them.)
_REFUSED_OUTPUT = frozenset(
    (
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_MSG,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.POLICY_VIOLATION,
    )
)


class RefusedOutputs:
    """The suspects of one failed transaction, and the probe that clears or pins them.

    Poll thread only, like the transactional committer that owns it::

        refused = RefusedOutputs(rules, timeout=30.0)
        producer.produce(..., on_delivery=functools.partial(refused.delivered, source))
        # the transaction failed and was aborted:
        if refused.probe(outputs, producer, produce, stopped_by_fence):
            producer = None  # given up: rebuilt before the next transaction

    :param rules: where a refusal is pinned to its record (the execution reads it there).
    :param timeout: seconds for each transactional call of a probe.
    """

    def __init__(self, rules: OutputRules, timeout: float) -> None:
        self._rules = rules
        self._timeout = timeout
        self._suspects: dict[Source, str] = {}  # records whose output the broker refused

    def delivered(self, source: Source, err: KafkaError | None, msg: Any) -> None:
        """The broker refused an output for what it is, not for its own state: its record is
        a suspect. Not yet the culprit: the broker refuses a whole batch for one bad record,
        so every output of that batch reports the same error.

        Caller: the producer's delivery report of each output of a transaction (poll thread).
        Affects: the suspects."""
        if err is not None and err.code() in _REFUSED_OUTPUT:
            self._suspects[source] = str(err)

    def probe(
        self,
        outputs: list[tuple[Source, OutputMessage]],
        producer: Any,
        produce: Produce,
        stopped_by_fence: Callable[[BaseException], bool],
    ) -> bool:
        """After the failed transaction was aborted: produce each suspect record's outputs
        alone, in a transaction that is always aborted, and pin the refusal to the records
        whose own outputs are refused. True if the producer became unusable and was purged:
        the caller drops it (rebuilt, settling what is open, before the next commit), and the
        next failure probes again.

        Caller: the transactional committer, after recovering from a failed transaction.
        Affects: the suspects (all taken), the rules' pins, and ``producer``'s transactions.

        :param outputs: the failed transaction's outputs, each with its record.
        :param producer: the committer's producer (None: nothing is probed, suspects stay).
        :param produce: sends one output through ``producer`` with a delivery callback.
        :param stopped_by_fence: the committer's fence handling: True if a failure was a fence
            that stopped the member (the producer is dropped already).
        """
        if not self._suspects or producer is None:
            return False
        suspects, self._suspects = self._suspects, {}
        by_record: dict[Source, list[OutputMessage]] = {}
        for source, message in outputs:
            if source in suspects and message.source_partition is None:
                by_record.setdefault(source, []).append(message)
        for source, messages in list(by_record.items())[:_MAX_PROBES]:
            refusal, usable = self._probe_one(messages, producer, produce, stopped_by_fence)
            if not usable:
                return True
            if refusal is not None and self._rules.pin(source, refusal):
                log.error("output of %s[%d]@%d refused by the broker (%s): the record takes "
                          "its poison path when it is redone", *source, refusal)  # fmt: skip
        return False

    def _probe_one(
        self,
        messages: list[OutputMessage],
        producer: Any,
        produce: Produce,
        stopped_by_fence: Callable[[BaseException], bool],
    ) -> tuple[str | None, bool]:
        """One record's outputs alone: (the refusal or None, whether the producer is usable)."""
        refusals: list[str] = []

        def report(err: KafkaError | None, msg: Any) -> None:
            if err is not None and err.code() in _REFUSED_OUTPUT:
                refusals.append(str(err))

        try:
            producer.begin_transaction()
            for message in messages:
                produce(message, report)
            left = producer.flush(self._timeout)
            producer.abort_transaction(self._timeout)
        except KafkaException as exc:
            if stopped_by_fence(exc):
                return None, False
            err = exc.args[0] if exc.args else None
            try:
                if not (isinstance(err, KafkaError) and err.txn_requires_abort()):
                    raise
                producer.abort_transaction(self._timeout)
            except KafkaException:
                with contextlib.suppress(KafkaException, RuntimeError):
                    producer.purge()
                return None, False
            return (refusals[0] if refusals else None), True
        return (refusals[0] if refusals and not left else None), True
