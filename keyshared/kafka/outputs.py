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
topic that does not exist) is refused by ``produce`` itself (:class:`OutputRules`), inside the
handler: the attempt fails and the retry and poison policies apply to its record. Found only
in the transaction, the same mistake would fail every record committed with it.
When the attempt ends the :class:`Output` is sealed: its messages are handed over as a copy,
and a later ``produce`` (a thread the handler left running, a call after ``ack``) raises
instead of adding to a list that is committed or not depending on timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException

from keyshared.errors import OutputError

__all__ = ["Output", "OutputMessage", "OutputRules", "PartitionOutputs"]

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

    __slots__ = ("_rules", "messages", "sealed")

    def __init__(self, rules: OutputRules | None = None) -> None:
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


# librdkafka refuses a message when key + value + serialized headers + this worst-case record
# overhead (length, attributes, timestamp and offset deltas, key/value/header-count varints)
# exceed message.max.bytes (rd_kafka_msg_new0). Checked against the library: test_outputs.
_RECORD_OVERHEAD = 36
_MAX_PINNED = 10_000
_PAYLOAD = (str, bytes)
_REFUSED = {
    KafkaError.UNKNOWN_TOPIC_OR_PART: "the topic does not exist (create it first)",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "not authorized to describe the topic",
    KafkaError.TOPIC_EXCEPTION: "the topic name is invalid",
}


def _varint_size(n: int) -> int:
    """Bytes of a zigzag varint (Kafka record fields) of ``n``."""
    zigzag = (n << 1) ^ (n >> 63)
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def _length(field: str, value: object, topic: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, str):
        # isascii() is a flag read in CPython: most strings need no encoding to be measured
        return len(value) if value.isascii() else len(value.encode("utf-8"))
    raise OutputError(
        topic, f"the {field} must be str, bytes or None (serialize it first), "
        f"got {type(value).__name__}",
    )  # fmt: skip


def _headers_size(headers: object, topic: str, exact: bool = False) -> int:
    """Serialized size of the headers; unless ``exact``, with the worst case of 5 bytes per
    length varint (cheaper, and only a message near the limit needs the exact size)."""
    if isinstance(headers, dict):
        items: Any = headers.items()
    elif isinstance(headers, list):
        items = headers
    else:
        raise OutputError(
            topic, f"headers must be a list of (name, value) pairs or a dict, "
            f"got {type(headers).__name__}",
        )  # fmt: skip
    size = 0
    for item in items:
        if type(item) is not tuple or len(item) != 2:
            raise OutputError(topic, f"each header must be a (name, value) pair, got {item!r}")
        name, value = item
        if not isinstance(name, _PAYLOAD):
            raise OutputError(topic, f"a header name must be str, got {type(name).__name__}")
        name_size = _length("header name", name, topic)
        if value is None:
            value_size = -1
        else:
            value_size = (
                len(value) if type(value) is bytes else _length(f"header {name!r}", value, topic)
            )
        if exact:
            size += _varint_size(name_size) + _varint_size(value_size)
        else:
            size += 10
        size += name_size + max(value_size, 0)
    return size


class OutputRules:
    """What the transactional producer would refuse, checked in ``record.output.produce``.

    Types and size cost a few ``isinstance`` and ``len`` calls per message. A topic is looked
    up once (a metadata request from the calling thread) and remembered: known topics for the
    run; a topic the broker said is missing or forbidden for ``refusal_ttl`` seconds (its
    records fail meanwhile without asking again, and a topic created later is found). A lookup
    the broker did not answer refuses nothing: the message goes on unchecked for
    ``refusal_ttl`` seconds (a broker outage must not fail records), and the transaction finds
    what is left.

    :param max_bytes: the producer's ``message.max.bytes``.
    :param lookup: ``topic -> TopicMetadata`` (the consumer's ``list_topics``); None: no check.
    """

    def __init__(
        self,
        max_bytes: int,
        lookup: Callable[[str], Any] | None,
        refusal_ttl: float = 5.0,
    ) -> None:
        self.max_bytes = max_bytes
        self._lookup = lookup
        self._ttl = refusal_ttl
        self._known: set[str] = set()
        self._until: dict[str, tuple[float, str | None]] = {}  # topic -> (until, refusal)
        self._lock = threading.Lock()
        # (topic, partition, offset) -> the broker's refusal of one of that record's outputs,
        # inside a transaction that was aborted: the record is failed, not run, when redone.
        self.refused: dict[tuple[str, int, int], str] = {}

    def pin(self, source: tuple[str, int, int], error: object) -> bool:
        """Remember that the broker refused an output of record ``source``; False if it was
        already pinned. Bounded: a record redone elsewhere never comes to take its entry."""
        if source in self.refused:
            return False
        if len(self.refused) >= _MAX_PINNED:
            self.refused.pop(next(iter(self.refused)), None)
        self.refused[source] = str(error)
        return True

    def take_refusal(self, topic: str, partition: int, offset: int) -> OutputError | None:
        """The refusal pinned to this record (once), as the error its attempt fails with."""
        problem = self.refused.pop((topic, partition, offset), None)
        if problem is None:
            return None
        return OutputError(topic, f"the broker refused an output of this record: {problem}")

    def check(self, topic: str, key: object, value: object, headers: object) -> None:
        """Raise :class:`~keyshared.errors.OutputError` for a message the producer would refuse."""
        # bytes first, without a call: the common case of a handler that serialized its value
        size = len(value) if type(value) is bytes else _length("value", value, topic)
        size += len(key) if type(key) is bytes else _length("key", key, topic)
        if headers is not None:
            upper = size + _headers_size(headers, topic)
            if upper + _RECORD_OVERHEAD > self.max_bytes:
                size += _headers_size(headers, topic, exact=True)
            else:
                size = upper
        if size + _RECORD_OVERHEAD > self.max_bytes:
            raise OutputError(
                topic, f"the message is {size} bytes (key, value and headers), over the "
                f"producer's message.max.bytes ({self.max_bytes}, less "
                f"{_RECORD_OVERHEAD} bytes of record overhead)",
            )  # fmt: skip
        if topic not in self._known and self._lookup is not None:
            self._check_topic(topic)

    def _check_topic(self, topic: str) -> None:
        with self._lock:  # one lookup at a time: a burst of records to a new topic asks once
            if topic in self._known:
                return
            now = time.monotonic()
            held = self._until.get(topic)
            if held is None or held[0] <= now:
                held = self._ask(topic, now)
        if held[1] is not None:
            raise OutputError(topic, held[1])

    def _ask(self, topic: str, now: float) -> tuple[float, str | None]:
        assert self._lookup is not None
        try:
            meta = self._lookup(topic)
        except (KafkaException, OSError, RuntimeError):
            meta = None  # no answer: unchecked for a while, never refused
        error = getattr(meta, "error", None)
        code = error.code() if isinstance(error, KafkaError) else None
        if meta is not None and error is None and meta.partitions:
            self._known.add(topic)
            self._until.pop(topic, None)
            return (now, None)
        refusal = _REFUSED.get(code) if code is not None else None
        if refusal is not None:
            refusal = f"{refusal} ({error})"
        held = (now + self._ttl, refusal)
        self._until[topic] = held
        return held


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

    def take(self) -> list[tuple[int, list[OutputMessage]]]:
        """Dispatcher lock: everything ready, oldest first, for the next transaction."""
        taken, self.ready = self.ready, []
        return taken

    def give_back(self, kept: list[tuple[int, list[OutputMessage]]]) -> None:
        """Dispatcher lock: outputs the commit could not cover yet go first next time."""
        self.ready[:0] = kept
