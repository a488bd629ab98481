"""Where a ``key_shared`` member's ranges resume: the cursors read, per partition, as claims.

Kafka's committed offsets and the topics' incarnation records are read first, so that cursors
of another topic incarnation (a recreated topic, offsets reset while the group was stopped)
count for nothing; then the cursors of the ranges overlapping those held, decoding only those
that changed since the last read; then each partition's claims: per held range, the latest
holder's cursor, or the partition's base where no cursor covers it
(:class:`keyshared.core.claims.PartitionClaims`).

Only overlapping cursors can say where a held slot stands, so the others are never read: a
re-read costs what the member holds, not what the group has (its members, its history of range
shapes).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from coordinator.cursors import read_cursors
from coordinator.incarnations import Incarnation
from keyshared.core.claims import PartitionClaims
from keyshared.core.slots import SlotRange
from keyshared.core.types import TP
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.modes.range_cursors import Decoded, describe_claims, stored_cursors
from keyshared.modes.topic_watch import TopicWatch

if TYPE_CHECKING:
    from keyshared.modes.recipes import Recipes

__all__ = ["ClaimsReader"]

trace = logging.getLogger("keyshared.trace")  # cursor diagnostics, off unless set to DEBUG


class ClaimsReader:
    """Reads the claims of the ranges a member holds (on the poll thread).

    :param zk: the coordinator.
    :param group: the consumer group.
    :param topics: the member's topic watch (incarnations, bases).
    :param kafka_config: the consumer's config (``auto.offset.reset``).
    :param member: the member's id, for the trace.
    """

    def __init__(
        self,
        zk: Recipes,
        group: str,
        topics: TopicWatch,
        kafka_config: dict[str, Any],
        member: str,
    ) -> None:
        self._zk = zk
        self._group = group
        self._topics = topics
        self._reset = str(kafka_config.get("auto.offset.reset", "earliest"))
        self._member = member
        self._decoded: Decoded = {}  # the last read's decoded cursors (see stored_cursors)
        self.stamps: dict[TP, Incarnation] = {}  # the incarnations the last claims were read in

    def read(
        self, consumer: KafkaConsumer, held: list[tuple[SlotRange, int]]
    ) -> dict[TP, PartitionClaims]:
        """The claims of ``held`` (range, token) in every partition of the member's topics."""
        committed = self._topics.read(consumer)
        self.stamps = self._topics.incarnations()
        layout = self._zk.layout(self._group)
        overlapping = read_cursors(self._zk.client, layout, [slots for slots, _ in held])
        valid, _ = self._topics.split(overlapping)
        decoded: Decoded = {}
        stored = stored_cursors(valid, self._decoded, decoded)
        self._decoded = decoded
        bases = self._topics.bases(consumer, committed, self._reset)
        claims = {
            tp: PartitionClaims.resolve(held, stored.get(tp, []), base)
            for tp, base in bases.items()
        }
        if trace.isEnabledFor(logging.DEBUG):
            trace.debug("%s read %s", self._member, describe_claims(claims))
        return claims
