"""What the transactional producer would refuse, checked inside the handler.

``record.output.produce(...)`` asks these rules before it stages a message (see
:mod:`keyshared.runtime.outputs`): the types confluent-kafka's ``produce`` takes, the size
librdkafka checks against ``message.max.bytes``, and whether the topic exists (looked up once
per topic through the consumer's metadata, never per message). A refusal raises inside the
handler, where retry and the poison policy apply to its record; an output the broker refuses
only inside a transaction is pinned to its record here, so the redo dead-letters it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from keyshared.errors import OutputError

__all__ = ["OutputRules"]


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
