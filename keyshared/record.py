"""The record a handler sees: a stable, typed view of one Kafka message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Header", "OutputHeaders", "Record", "RecordOutput"]

Header = tuple[str, bytes | None]
# The headers of an output message: pairs, or a dict; values ``str``, ``bytes`` or None.
OutputHeaders = list[tuple[str, str | bytes | None]] | dict[str, str | bytes | None] | None


class RecordOutput(Protocol):
    """What a handler may do with ``record.output``: stage messages that are committed in
    one Kafka transaction with the offsets that mark the record finished. Filled by the
    exactly-once runtime (``keyshared.runtime.outputs.Output``); the handler needs no more."""

    def produce(
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        headers: OutputHeaders = None,
    ) -> None:
        """Stage one message (partitioned by its key, murmur2, like Java producers).

        :raises keyshared.OutputError: the producer would refuse the message, or the
            record's attempt already ended.
        """


@dataclass(slots=True)
class Record:
    """One Kafka record as handed to a handler.

    ``key`` and ``value`` are the deserialized forms (raw ``bytes`` unless a deserializer was
    configured); ordering always uses the raw key bytes, so a deserializer can never change
    which records are ordered together. ``attempt`` starts at 1 and grows with each retry.
    ``fencing_token`` is set when a coordinator grants this member the record's partition or
    slot range: it is larger for every later holder, so a handler that passes it to its own
    store (a conditional write) can refuse a late write from a member that lost the range.
    ``output`` is set by an exactly-once consumer (``exactly_once=True``): messages given to
    ``record.output.produce(...)`` are staged with this record and committed in one Kafka
    transaction with the offsets that mark it finished; a failed attempt's messages are
    discarded. ``produce`` raises :class:`keyshared.OutputError` for a message the producer
    would refuse (so the attempt fails where retry and the poison policy apply), and once the
    attempt ended (the handler returned, or the record was acked). None otherwise.
    Not frozen: a frozen dataclass costs several microseconds per record to build, and a
    handler that edits its copy changes nothing in keyshared.
    """

    key: Any
    value: Any
    topic: str
    partition: int
    offset: int
    headers: tuple[Header, ...]
    timestamp: float | None
    attempt: int
    raw_key: bytes | None = None
    fencing_token: int | None = None
    output: RecordOutput | None = None

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name``, or None."""
        for hname, hvalue in reversed(self.headers):
            if hname == name:
                return hvalue
        return None
