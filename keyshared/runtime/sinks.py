"""Where the runtime sends what a record's poison policy decided: the DLQ and the key state.

The runtime decides (dead-letter, park, block); writing the decision to Kafka is the Kafka
layer's (``keyshared.kafka.dlq.DeadLetterWriter``, ``keyshared.kafka.keystate.KeyStateStore``).
These protocols are the whole of what the executor asks of them, so the runtime names no Kafka
module, and a broker-less test hands in a fake with these methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from keyshared.runtime.outputs import OutputMessage

__all__ = ["DeadLetters", "Decoder", "Failure", "KeyStates"]

# (the field's bytes, the message it came from) -> the deserialized object; built by the Kafka
# layer from the user's deserializer (a plain callable or a confluent-kafka Deserializer).
Decoder = Callable[[bytes | None, Any], Any]


class Failure(NamedTuple):
    """What a record's dead letter says of its failure, beside the record itself."""

    attempts: int
    error: BaseException | None  # None: a parked key's later record, which never ran
    reason: str  # exhausted, not_retriable, do_not_retry, deserialization, parked, ...
    traceback_text: str
    first_failure: float  # epoch seconds


class DeadLetters(Protocol):
    """The DLQ, as the executor uses it."""

    def send(
        self,
        msg: Any,
        failure: Failure,
        *,
        still_wanted: Callable[[], bool],
        on_acked: Callable[[], None],
        on_abandoned: Callable[[], None] | None = None,
    ) -> None:
        """At-least-once: write ``msg``'s dead letter; ``on_acked`` once the broker has it,
        else ``on_abandoned`` once (``still_wanted()`` turned False, or the writer closed)."""

    def letter(self, msg: Any, failure: Failure) -> OutputMessage:
        """Exactly-once: ``msg``'s dead letter as an output of its record, committed with it."""


class KeyStates(Protocol):
    """The key-state topic, as the executor uses it (``block`` and ``park`` policies)."""

    def record_blocked(
        self, topic: str, partition: int, key: bytes | None, offset: int, error: str
    ) -> None:
        """Record ``key`` as blocked, for status and release (best effort)."""

    def park(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        offset: int,
        *,
        still_wanted: Callable[[], bool],
        on_durable: Callable[[], None],
        on_abandoned: Callable[[], None] | None = None,
    ) -> None:
        """Record ``key`` as parked; ``on_durable`` once the broker has it."""
