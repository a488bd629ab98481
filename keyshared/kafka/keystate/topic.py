"""The key-state topic itself: created on first use, and where it ends right now.

Its end offset is the read barrier of the store: every write acknowledged before a call is
below that offset, so once the tail has read up to it the in-memory view includes them all
(see ``KeyStateStore.sync``). A topic that was just created has no leader for a moment; asking
for its end then fails with errors that only mean "not yet", and those are waited out.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import zlib
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from keyshared.kafka.keystate.errors import KeyStateError

__all__ = ["TopicEnd", "ensure_topic", "group_topic"]

log = logging.getLogger(__name__)

# What a topic answers in the moments after its creation, before its leader is known everywhere.
_NOT_READY_YET = frozenset({
    KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
})  # fmt: skip
FRESH_CLIENT_AFTER_S = 2.0
"""How long a client may keep answering "not yet" before a new client asks instead."""


def group_topic(prefix: str, group: str) -> str:
    """The topic ``prefix.<group>`` that keyshared keeps for a consumer group (key state,
    finished sets); characters a topic name cannot hold are replaced and a checksum keeps two
    such groups apart."""
    safe = re.sub(r"[^a-zA-Z0-9._-]", "_", group)
    if safe != group:
        safe = f"{safe[:200]}-{zlib.crc32(group.encode()):08x}"
    return f"{prefix}.{safe}"


def ensure_topic(
    admin: AdminClient,
    topic: str,
    group: str,
    timeout: float,
    create: bool,
    config: Mapping[str, str] | None = None,
    what: str = "key-state",
) -> None:
    """Create ``topic`` (one partition, compacted) unless it exists.

    :param group: the group whose keys the topic holds, for the error message.
    :param create: False for tools that must not invent a group; a missing topic is then an
        error.
    :param config: the topic's configuration (default: compacted).
    :param what: what the topic holds, for log lines and errors.
    :raises KeyStateError: Kafka is unreachable, the topic is missing and ``create`` is
        False, or it could not be created.
    """
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise KeyStateError(f"cannot reach Kafka to read {topic!r}: {exc}") from exc
    if topic in metadata.topics and metadata.topics[topic].error is None:
        return
    if not create:
        raise KeyStateError(f"no key state for group {group!r}: topic {topic!r} "
                            "does not exist (no member of that group ever blocked or parked "
                            "a key, or the group name is wrong)")  # fmt: skip
    replicas = min(3, len(metadata.brokers))
    new = NewTopic(topic, num_partitions=1, replication_factor=replicas,
                   config=dict(config or {"cleanup.policy": "compact"}))  # fmt: skip
    try:
        admin.create_topics([new], operation_timeout=timeout)[topic].result(timeout)
        log.info("created %s topic %r (compacted, %d replica(s))", what, topic, replicas)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise KeyStateError(f"cannot create {what} topic {topic!r}: {exc}") from exc


class TopicEnd:
    """Answers "where does the topic end?"; its consumer never reads records or joins a group.

    :param topic: the key-state topic.
    :param client: client-level properties (bootstrap servers, security).
    """

    def __init__(self, topic: str, client: Mapping[str, Any]) -> None:
        self.topic = topic
        self._lock = threading.Lock()
        self._config = {**client, "group.id": f"{topic}.tail"}
        self._watermarks = Consumer(self._config)

    def offset(self, timeout: float) -> int:
        """The topic's end offset; retried while a just-created topic has no leader yet.

        A client that keeps answering "not yet" for ``FRESH_CLIENT_AFTER_S`` is replaced by a
        new one: after a rolling restart of every broker a long-lived client answered "Local:
        Unknown partition" for the whole 30 s timeout while a client created after the restart
        answered at once (an exclusive member's activation waits on this, and the group on it).

        :raises KeyStateError: no answer within ``timeout``, or an error that is not transient.
        """
        tp = KafkaTopicPartition(self.topic, 0)
        deadline = time.monotonic() + timeout
        with self._lock:
            failing_since: float | None = None
            while True:
                remaining = max(deadline - time.monotonic(), 0.1)
                try:
                    _low, high = self._watermarks.get_watermark_offsets(tp, remaining, cached=False)
                    return int(high)
                except KafkaException as exc:
                    err = exc.args[0]
                    transient = err.retriable() or err.code() in _NOT_READY_YET
                    now = time.monotonic()
                    if not transient or now >= deadline:
                        raise KeyStateError(
                            f"cannot read the end of {self.topic!r}: {err}"
                        ) from exc
                    if failing_since is None:
                        failing_since = now
                    elif now - failing_since >= FRESH_CLIENT_AFTER_S:
                        self._renew(err)
                        failing_since = now
                    time.sleep(0.1)

    def _renew(self, err: KafkaError) -> None:
        log.warning(
            "%r still answers %s after %gs: asking through a new client",
            self.topic,
            err,
            FRESH_CLIENT_AFTER_S,
        )
        old, self._watermarks = self._watermarks, Consumer(self._config)
        old.close()

    def close(self) -> None:
        self._watermarks.close()
