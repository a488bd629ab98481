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
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Output", "OutputMessage", "PartitionOutputs"]

Headers = list[tuple[str, str | bytes | None]] | dict[str, str | bytes | None] | None


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


class Output:
    """``record.output``: the handler's messages, committed only with the record.

    Example::

        def enrich(record: keyshared.Record) -> None:
            record.output.produce("orders.enriched", key=record.raw_key, value=b"...")

    The messages of a record are produced in the order given, after those of the key's earlier
    records. A handler that produces with its own producer instead gets no such guarantee.
    """

    __slots__ = ("messages",)

    def __init__(self) -> None:
        self.messages: list[OutputMessage] = []

    def produce(
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        headers: Headers = None,
    ) -> None:
        """Stage a message (the partition comes from the key, murmur2 like Java producers)."""
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic must be a non-empty string, got {topic!r}")
        self.messages.append(OutputMessage(topic, key, value, headers))


class PartitionOutputs:
    """One partition assignment's outputs between a handler's success and their transaction.

    ``staged`` is written by workers (one offset each, a single dict store) and read by the
    dispatcher; ``ready`` only under the dispatcher lock. Both die with the partition state, so
    outputs of a lost partition are discarded with its unfinished records.
    """

    __slots__ = ("ready", "staged")

    def __init__(self) -> None:
        self.staged: dict[int, list[OutputMessage]] = {}
        self.ready: list[tuple[int, list[OutputMessage]]] = []

    def stage(self, offset: int, messages: list[OutputMessage]) -> None:
        """A record's handler succeeded (or its dead letter is built): hold its messages."""
        held = self.staged.get(offset)
        if held is None:
            self.staged[offset] = messages
        else:
            held.extend(messages)

    def release(self, offset: int) -> None:
        """Dispatcher lock: the record is finished in its window; its messages may go out."""
        messages = self.staged.pop(offset, None)
        if messages:
            self.ready.append((offset, messages))

    def take(self) -> list[tuple[int, list[OutputMessage]]]:
        """Dispatcher lock: everything ready, oldest first, for the next transaction."""
        taken, self.ready = self.ready, []
        return taken

    def give_back(self, kept: list[tuple[int, list[OutputMessage]]]) -> None:
        """Dispatcher lock: outputs the commit could not cover yet go first next time."""
        self.ready[:0] = kept
