"""Exactly-once outputs: messages staged per record until the record's offset is committed.

A handler of an exactly-once consumer writes through ``record.output.produce(...)``. Nothing
reaches Kafka from there: the messages wait with their record, in three steps that each have
one owner, so a message is committed exactly when its record is:

1. **attempt** (:class:`Output`, the worker): the handler's messages of this attempt. A failed
   attempt's are dropped with its ``Record``; only a success stages them.
2. **staged** (:attr:`PartitionOutputs.staged`, written by the worker, keyed by offset): the
   handler returned, but the record is not settled yet (settlement batches successes).
3. **ready** (:attr:`PartitionOutputs.ready`, under the dispatcher lock): the window marked the
   record finished. The dispatcher moves the messages here in the same critical section, so a
   commit snapshot taken under that lock sees a record finished exactly when it sees its
   outputs ready; the transaction then carries both or neither.

Records of one key finish in order, so a key's messages enter ``ready`` in its order.
Dead letters take the same path (``RecordExecutor`` stages them): in exactly-once mode a
dead letter is one more output of its record.

What the producer would refuse (a value it cannot send, a message over its size limit, a
topic that does not exist) is refused by ``produce`` itself (an :class:`OutputCheck`, filled by
:class:`keyshared.kafka.output_rules.OutputRules`), inside the
handler: the attempt fails and the retry and poison policies apply to its record. Found only
in the transaction, the same mistake would fail every record committed with it.
When the attempt ends the :class:`Output` is sealed: its messages are handed over as a copy,
and a later ``produce`` (a thread the handler left running, a call after ``ack``) raises
instead of adding to a list that is committed or not depending on timing.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple, Protocol

from keyshared.errors import OutputError
from keyshared.record import OutputHeaders

if TYPE_CHECKING:
    from keyshared.record import Record

__all__ = [
    "Output",
    "OutputCheck",
    "OutputMessage",
    "PartitionOutputs",
    "held_bytes",
    "message_bytes",
    "output_of",
]

Headers = OutputHeaders


class OutputMessage(NamedTuple):
    """One message to produce in the transaction that commits its record.

    ``source_partition`` is set for a dead letter: it goes to DLQ partition
    ``source_partition % partitions``, as the at-least-once DLQ writer does.
    """

    topic: str
    key: str | bytes | None
    value: str | bytes | None
    headers: Headers
    source_partition: int | None = None


def message_bytes(message: OutputMessage) -> int:
    """What a held message weighs for the held-output budget: its key, value and headers
    (``len`` of a ``str``: its characters, a lower bound of its UTF-8 size; None weighs 0)."""
    size = len(message.key or b"") + len(message.value or b"")
    headers = message.headers
    if headers:
        pairs = headers.items() if isinstance(headers, dict) else headers
        for name, value in pairs:
            size += len(name) + len(value or b"")
    return size


def held_bytes(items: list[tuple[int, list[OutputMessage]]]) -> int:
    """The weight of one partition's held outputs (as :meth:`PartitionOutputs.take` returns)."""
    return sum(message_bytes(m) for _, messages in items for m in messages)


class OutputCheck(Protocol):
    """What the producer would refuse, checked as the handler produces (no round trip per
    message); raises :class:`keyshared.errors.OutputError` naming the problem. ``refused``
    holds the records whose output the broker refused inside a transaction: their next run
    takes the poison path at once (:meth:`take_refusal`)."""

    refused: dict[tuple[str, int, int], str]

    def check(self, topic: str, key: object, value: object, headers: object) -> None: ...

    def take_refusal(self, topic: str, partition: int, offset: int) -> Exception | None: ...


class Output:
    """``record.output``: the handler's messages, committed only with the record.

    Example::

        def enrich(record: keyshared.Record) -> None:
            record.output.produce("orders.enriched", key=record.raw_key, value=b"...")

    The messages of a record are produced in the order given, after those of the key's earlier
    records. A handler that produces with its own producer instead gets no such guarantee.
    """

    __slots__ = ("_rules", "messages", "sealed")

    def __init__(self, rules: OutputCheck | None = None) -> None:
        self.messages: list[OutputMessage] = []
        self.sealed = False
        self._rules = rules

    def produce(
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        headers: Headers = None,
    ) -> None:
        """Stage a message (the partition comes from the key, murmur2 like Java producers).

        :raises keyshared.OutputError: the producer would refuse the message (a value, key or
            header that is not ``str``/``bytes``/``None``, a message over the producer's
            ``message.max.bytes``, a topic that does not exist or may not be described), or
            the attempt already ended (the handler returned, or the record was acked).
        """
        if self.sealed:
            raise OutputError(
                topic, "record.output is sealed: its attempt ended (the handler returned or "
                "the record was acked); produce from inside the handler",
            )  # fmt: skip
        if not isinstance(topic, str) or not topic:
            raise OutputError(topic, "the topic must be a non-empty string")
        if self._rules is not None:
            self._rules.check(topic, key, value, headers)
        self.messages.append(OutputMessage(topic, key, value, headers))

    def seal(self) -> list[OutputMessage]:
        """The attempt ended: no more messages; a copy of them, to stage (or drop)."""
        self.sealed = True
        return list(self.messages) if self.messages else []


class PartitionOutputs:
    """One partition assignment's outputs between a handler's success and their transaction.

    ``staged`` is written by workers (one offset each, a single dict store) and read by the
    dispatcher; ``ready`` only under the dispatcher lock. Both die with the partition state, so
    outputs of a lost partition are discarded with its unfinished records.

    ``ready_bytes`` weighs ``ready`` (:func:`message_bytes`), kept as it changes so the
    backpressure bounds what waits for a commit without scanning it. ``since`` is when the
    oldest output held here became ready (monotonic; None: nothing held), so a commit too
    large for one transaction sends the partitions that waited longest first.
    """

    __slots__ = ("ready", "ready_bytes", "since", "staged", "taken_since")

    def __init__(self) -> None:
        self.staged: dict[int, list[OutputMessage]] = {}
        self.ready: list[tuple[int, list[OutputMessage]]] = []
        self.ready_bytes = 0
        self.since: float | None = None
        self.taken_since: float | None = None  # ``since`` of what the last take took

    def stage(self, offset: int, messages: list[OutputMessage]) -> None:
        """A record's handler succeeded (or its dead letter is built): hold its messages.
        ``messages`` becomes this object's: a sealed attempt's copy, or a fresh list."""
        held = self.staged.get(offset)
        if held is None:
            self.staged[offset] = messages
        else:
            held.extend(messages)

    def stage_attempt(self, offset: int, output: Output) -> None:
        """The record's attempt succeeded: seal its ``record.output`` and stage a copy of its
        messages, so nothing the handler (or a thread it left behind) does afterwards changes
        what is committed."""
        messages = output.seal()
        if messages:
            self.stage(offset, messages)

    def release(self, offset: int) -> None:
        """Dispatcher lock: the record is finished in its window; its messages may go out."""
        messages = self.staged.pop(offset, None)
        if messages:
            self.ready.append((offset, messages))
            self.ready_bytes += sum(message_bytes(m) for m in messages)
            if self.since is None:
                self.since = time.monotonic()

    def take(self) -> list[tuple[int, list[OutputMessage]]]:
        """Dispatcher lock: everything ready, oldest first, for the next transaction."""
        taken, self.ready = self.ready, []
        self.ready_bytes = 0
        self.taken_since, self.since = self.since, None
        return taken

    def give_back(self, kept: list[tuple[int, list[OutputMessage]]]) -> None:
        """Dispatcher lock: outputs the commit could not cover yet go first next time."""
        if not kept:
            return
        self.ready[:0] = kept
        self.ready_bytes += held_bytes(kept)
        since = self.taken_since if self.taken_since is not None else time.monotonic()
        if self.since is None or since < self.since:
            self.since = since

    def drop(self) -> None:
        """Dispatcher lock, nothing of the partition running: the log these outputs came from
        is gone (a rewind). What was not committed of it is not committed: its records are
        read again if the new log still has them, so their outputs come again with them."""
        self.staged.clear()
        self.ready.clear()
        self.ready_bytes = 0
        self.since = self.taken_since = None


def output_of(record: Record) -> Output:
    """The :class:`Output` the executor put in ``record.output`` (the handler sees it only
    as a :class:`keyshared.record.RecordOutput`): the runtime seals and stages what it made.
    Callers check ``record.output is not None`` first."""
    return record.output  # type: ignore[return-value]
