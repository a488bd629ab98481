"""Names the whole package shares, declared once.

``TP`` is how every layer names a topic partition: a plain tuple, because it is a dict key on
the per-record path and confluent-kafka's ``TopicPartition`` is neither hashable by value nor
cheap to build. The Kafka adapters convert at their edge.
"""

from __future__ import annotations

__all__ = ["TP"]

TP = tuple[str, int]
"""A topic partition: ``(topic, partition)``."""
