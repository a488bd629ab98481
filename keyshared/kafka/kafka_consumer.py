"""What keyshared calls on a Kafka consumer, as a protocol.

The adapters and modes used to take the consumer as ``Any``, so a typo in a method name or a
keyword reached a broker before anyone noticed. They take a :class:`KafkaConsumer` instead. Its
signatures are those of confluent-kafka's own stubs (``cimpl.pyi``), and mypy checks, in
``_confluent_consumer_is_one`` below, that ``confluent_kafka.Consumer`` satisfies it: an earlier
version with looser types (``Sequence[Any]``) was satisfied by the tests' fakes but not by the
real consumer. Broker-less tests' fakes need only the methods their code path calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol, cast, overload

from confluent_kafka import Message, TopicPartition

if TYPE_CHECKING:
    from confluent_kafka import Consumer

__all__ = ["NOT_JOINED", "KafkaConsumer"]

RebalanceCallback = Callable[[Any, list[TopicPartition]], None]


class KafkaConsumer(Protocol):
    """The subset of ``confluent_kafka.Consumer`` that keyshared uses, with the types of
    confluent-kafka's own stubs (mypy checks below that the real consumer satisfies it)."""

    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = ...,
        on_revoke: RebalanceCallback | None = ...,
        on_lost: RebalanceCallback | None = ...,
    ) -> None: ...

    def assign(self, partitions: list[TopicPartition]) -> None: ...

    def incremental_assign(self, partitions: list[TopicPartition]) -> None: ...

    def assignment(self) -> list[TopicPartition]: ...

    def pause(self, partitions: list[TopicPartition]) -> None: ...

    def resume(self, partitions: list[TopicPartition]) -> None: ...

    def seek(self, partition: TopicPartition) -> None: ...

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...

    def poll(self, timeout: float = ...) -> Message | None: ...

    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Message]: ...

    def committed(
        self, partitions: list[TopicPartition], timeout: float = ...
    ) -> list[TopicPartition]: ...

    @overload
    def commit(
        self, *, offsets: list[TopicPartition], asynchronous: Literal[True] = ...
    ) -> None: ...

    @overload
    def commit(
        self, *, offsets: list[TopicPartition], asynchronous: Literal[False]
    ) -> list[TopicPartition]: ...

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = ..., cached: bool = ...
    ) -> tuple[int, int]: ...

    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...

    def consumer_group_metadata(self) -> Any: ...

    def close(self) -> None: ...


if TYPE_CHECKING:

    def _confluent_consumer_is_one(consumer: Consumer) -> KafkaConsumer:
        return consumer  # mypy fails here if the protocol drifts from confluent-kafka's stubs


class _NotJoined:
    """Stands for the consumer of a mode that has not joined yet: typed as one, so the modes
    need no ``None`` checks, but any call says what went wrong instead of ``NoneType has no
    attribute``."""

    def __getattr__(self, name: str) -> Any:
        def refuse(*_args: object, **_kwargs: object) -> NoReturn:
            raise RuntimeError(f"consumer.{name}() called before join(): no consumer yet")

        return refuse

    def __repr__(self) -> str:
        return "NOT_JOINED"


NOT_JOINED: KafkaConsumer = cast(KafkaConsumer, _NotJoined())
