"""Partition mode's membership: the Kafka consumer group and its rebalance callbacks.

The group decides who owns which partition; this adapter only turns librdkafka's callbacks
(served inside ``consume``, on the poll thread) into the poll loop's membership events. The
ZooKeeper coordinator offers the same events from its own membership.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import TopicPartition

from keyshared.core.health import Role
from keyshared.core.holding import HoldingView
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.kafka.seams import MembershipEvents

__all__ = ["KafkaGroupMembership"]


def _tps(partitions: list[TopicPartition]) -> list[tuple[str, int]]:
    return [(tp.topic, tp.partition) for tp in partitions]


class KafkaGroupMembership:
    """Subscribes the consumer; assign, revoke and loss go to ``events`` as they happen."""

    def __init__(self) -> None:
        self._joined = False

    def join(self, consumer: KafkaConsumer, topics: list[str], events: MembershipEvents) -> None:
        def on_assign(_consumer: Any, partitions: list[TopicPartition]) -> None:
            # The group calls this on every join, with an empty list for a member it gives no
            # partition (cooperative or eager): joined, idle, and ready all the same.
            self._joined = True
            events.assigned(_tps(partitions))

        def on_revoke(_consumer: Any, partitions: list[TopicPartition]) -> None:
            events.revoked(_tps(partitions))  # drained or not, the group takes them now

        consumer.subscribe(
            topics,
            on_assign=on_assign,
            on_revoke=on_revoke,
            on_lost=lambda _c, partitions: events.lost(_tps(partitions)),
        )

    def tick(self) -> None:
        """Nothing to do: the group's protocol runs inside ``consume``."""

    def leave(self) -> None:
        """Nothing to do: closing the consumer leaves the group."""

    def rewound(self, tp: tuple[str, int]) -> bool:
        """The group's committed offsets are the only cursor: the poll loop starts again."""
        return False

    def role(self) -> Role:
        """A member once the group's first assignment arrived (possibly empty)."""
        return Role.MEMBER if self._joined else Role.JOINING

    def holding_views(self) -> tuple[HoldingView, ...]:
        """Nothing: without a coordinator, Kafka's group owns the partitions."""
        return ()
