"""What keyshared calls on a Kafka consumer, as a protocol.

confluent-kafka's ``Consumer`` is a C extension without type information, so the adapters
that take one used to say ``Any``, and a typo in a method name or a keyword reached a broker
before anyone noticed. Every adapter and mode takes a :class:`KafkaConsumer` instead:
``confluent_kafka.Consumer`` satisfies it, and so do the broker-less tests' fakes, which need
only the methods their code path calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["KafkaConsumer"]

# confluent-kafka's TopicPartition and Message carry no types either: named here for readers.
TopicPartitions = Sequence[Any]
RebalanceCallback = Callable[[Any, list[Any]], object]


class KafkaConsumer(Protocol):
    """The subset of ``confluent_kafka.Consumer`` that keyshared uses."""

    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback = ...,
        on_revoke: RebalanceCallback = ...,
        on_lost: RebalanceCallback = ...,
    ) -> None: ...

    def assign(self, partitions: TopicPartitions, /) -> None: ...

    def incremental_assign(self, partitions: TopicPartitions, /) -> None: ...

    def assignment(self) -> list[Any]: ...

    def pause(self, partitions: TopicPartitions, /) -> None: ...

    def resume(self, partitions: TopicPartitions, /) -> None: ...

    def seek(self, partition: Any, /) -> None: ...

    def position(self, partitions: TopicPartitions, /) -> list[Any]: ...

    def poll(self, timeout: float = ..., /) -> Any: ...

    def consume(self, num_messages: int = ..., timeout: float = ..., /) -> list[Any]: ...

    def committed(self, partitions: TopicPartitions, timeout: float = ...) -> list[Any]: ...

    def commit(
        self, message: Any = ..., offsets: TopicPartitions = ..., asynchronous: bool = ...
    ) -> list[Any] | None: ...

    def get_watermark_offsets(
        self, partition: Any, timeout: float = ..., cached: bool = ...
    ) -> tuple[int, int]: ...

    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...

    def consumer_group_metadata(self) -> Any: ...

    def close(self) -> None: ...
