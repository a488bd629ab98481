"""The consumer's positions, used to let cursors pass offsets that are never delivered.

Transaction markers and compacted-away offsets never reach the application, but the consumer's
position moves past them; without it a cursor would stop one short of the end of a
transactional partition for ever. A position is only evidence once the fetch it comes from is
this assignment's: right after a partition is assigned again at a lower offset, librdkafka
still reports where the previous fetch stood (the 30-minute chaos run lost 3,313 records to a
cursor moved by such a position, and members crashed when the records then arrived).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaException, TopicPartition

from keyshared.core.types import TP
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.runtime.dispatcher import Dispatcher
from keyshared.runtime.partition import PartitionState

__all__ = ["note_stale_positions", "observe_positions"]

log = logging.getLogger(__name__)


def note_stale_positions(consumer: KafkaConsumer, states: Mapping[TP, PartitionState]) -> None:
    """Remember each newly assigned partition's position: it proves nothing (see above)."""
    for state, offset in _positions(consumer, states):
        state.stale_position = offset


def observe_positions(
    consumer: KafkaConsumer, states: Mapping[TP, PartitionState], dispatcher: Dispatcher
) -> None:
    """Let the windows' cursors pass offsets the consumer skipped without delivering them."""
    dispatcher.observe_positions(_positions(consumer, states))


def _positions(
    consumer: KafkaConsumer, states: Mapping[TP, PartitionState]
) -> Iterable[tuple[PartitionState, int]]:
    """(state, position) of every partition in ``states`` the consumer knows a position of."""
    if not states:
        return []
    try:
        positions = consumer.position([TopicPartition(*tp) for tp in states])
    except KafkaException as exc:
        log.debug("position lookup failed: %s", exc)
        return []
    found = []
    for tp in positions:
        state = states.get((tp.topic, tp.partition))
        if state is not None and tp.offset >= 0:
            found.append((state, tp.offset))
    return found
