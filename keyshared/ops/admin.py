"""The thin Kafka layer of the operator commands: read facts, decide nothing.

Every call is bounded by the reader's ``timeout`` and every failure becomes an :class:`OpsError`
that says what could not be read, so ``status`` and ``verify`` can tell "the broker did not
answer" (exit 2) apart from "the group is not done" (exit 1). Nothing here joins the group or
commits: the readers use ``assign()`` and throwaway group ids, so inspecting a live group never
triggers a rebalance.

Example::

    reader = GroupReader({"bootstrap.servers": "127.0.0.1:9092"}, timeout=10.0)
    topics = reader.topics()                        # {"orders": 3, ...}; raises if unreachable
    committed = reader.committed("billing")         # {("orders", 0): (120, "ks1:..."), ...}
    reader.close()
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from keyshared.core.types import TP
from keyshared.errors import KeySharedError
from keyshared.kafka.client_config import client_properties
from keyshared.kafka.dlq_headers import DlqHeader
from keyshared.kafka.keystate import KeyStateError, KeyStateStore
from keyshared.ops.group_status import GroupInfo, Member

__all__ = ["GroupReader", "OpsError", "UnreachableBrokerError"]

# Log start and high watermark, in that order (list_offsets asks one spec per request).
_SPECS: tuple[Any, Any] = (OffsetSpec.earliest(), OffsetSpec.latest())  # type: ignore[no-untyped-call]


class OpsError(KeySharedError):
    """A fact could not be read (broker unreachable, topic missing, timeout)."""


class UnreachableBrokerError(OpsError):
    """The bootstrap servers did not answer a metadata request within the timeout."""


def _enum_name(value: object) -> str:
    name = getattr(value, "name", None)
    return str(name if name is not None else value).lower()


class GroupReader:
    """Reads a group's committed offsets, watermarks, members, key states and DLQ contents.

    :param config: client properties (bootstrap servers, security); consumer settings are ignored.
    :param timeout: seconds any single read may take before it fails with :class:`OpsError`.
    """

    def __init__(self, config: Mapping[str, Any], timeout: float) -> None:
        # The commands report a failure once, clearly; librdkafka's per-retry connection logs
        # would bury it. ``-X log_level=7`` brings them back for debugging.
        self._config = {"log_level": 2, **client_properties(config)}
        self._bootstrap = self._config.get("bootstrap.servers", "?")
        self.timeout = timeout
        self._admin = AdminClient(self._config)

    def close(self) -> None:
        """Nothing to release today (AdminClient has no close); kept for symmetry and ``with``."""

    def __enter__(self) -> GroupReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count; the first call, so it carries the reachability check."""
        try:
            metadata = self._admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise UnreachableBrokerError(
                f"Kafka at {self._bootstrap} did not answer within {self.timeout:g}s "
                f"({exc.args[0] if exc.args else exc}); is the broker running and reachable?"
            ) from None
        return {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }

    def describe_group(self, group: str) -> GroupInfo:
        """The coordinator's view of ``group``; an unknown group comes back in state ``dead``."""
        future = self._admin.describe_consumer_groups([group], request_timeout=self.timeout)[group]
        try:
            desc = future.result(timeout=self.timeout)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                return GroupInfo(group, "dead", "unknown", "", ())
            raise OpsError(f"cannot describe group {group!r}: {exc}") from None
        except TimeoutError:
            raise OpsError(f"describing group {group!r} took over {self.timeout:g}s") from None
        members = tuple(
            Member(
                member_id=m.member_id,
                client_id=m.client_id,
                host=m.host,
                assignment=tuple(
                    sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or ()))
                ),
            )
            for m in desc.members
        )
        return GroupInfo(
            group=group,
            state=_enum_name(desc.state),
            type=_enum_name(getattr(desc, "type", "classic")),
            assignor=desc.partition_assignor or "",
            members=members,
        )

    def committed(self, group: str) -> dict[TP, tuple[int, str | None]]:
        """Every committed ``(offset, metadata)`` of ``group``, by topic partition."""
        request = [ConsumerGroupTopicPartitions(group)]
        future = self._admin.list_consumer_group_offsets(request, request_timeout=self.timeout)
        try:
            result = future[group].result(timeout=self.timeout)
        except (KafkaException, TimeoutError) as exc:
            raise OpsError(f"cannot read the committed offsets of group {group!r}: {exc}") from None
        found: dict[TP, tuple[int, str | None]] = {}
        for tp in result.topic_partitions or ():
            if tp.error is None and tp.offset >= 0:
                found[(tp.topic, tp.partition)] = (tp.offset, getattr(tp, "metadata", None))
        return found

    def watermarks(self, partitions: Iterable[TP]) -> dict[TP, tuple[int, int]]:
        """``(log start, high watermark)`` of each partition."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        result: dict[TP, list[int]] = {tp: [0, 0] for tp in wanted}
        for index, spec in enumerate(_SPECS):
            request = {TopicPartition(topic, p): spec for topic, p in wanted}
            try:
                futures = self._admin.list_offsets(request, request_timeout=self.timeout)
                for tp, future in futures.items():
                    result[(tp.topic, tp.partition)][index] = future.result(self.timeout).offset
            except (KafkaException, TimeoutError) as exc:
                raise OpsError(f"cannot read watermarks of {wanted[0][0]!r}: {exc}") from None
        return {tp: (low, high) for tp, (low, high) in result.items()}

    def key_states(self, group: str, topic_exists: bool) -> list[dict[str, object]] | None:
        """The group's parked and blocked keys; ``None`` when it never had any (no topic)."""
        if not topic_exists:
            return None
        store = KeyStateStore(self._config, group, lambda *_: None, lambda *_: None)
        try:
            store.start(self.timeout, create=False)
            store.sync(self.timeout)
            return store.snapshot()
        except KeyStateError as exc:
            raise OpsError(str(exc)) from None
        finally:
            store.close(self.timeout)

    def _reader(self, **extra: Any) -> Any:
        return Consumer(
            {
                **self._config,
                "group.id": f"keyshared-ops-{uuid.uuid4().hex[:12]}",  # never joined or committed
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                **extra,
            }
        )

    def dead_letters(
        self, dlq_topic: str, partitions: int, group: str, source_topic: str
    ) -> dict[int, int]:
        """Count ``group``'s dead letters of ``source_topic`` in ``dlq_topic``, per source
        partition, by reading the DLQ to its end (records of other groups or topics sharing
        the DLQ are not counted)."""
        ends = self.watermarks((dlq_topic, p) for p in range(partitions))
        todo = {p: high for (_, p), (low, high) in ends.items() if high > low}
        counts: dict[int, int] = {}
        if not todo:
            return counts
        reader = self._reader()
        want_group, want_topic = group.encode(), source_topic.encode()
        try:
            reader.assign([TopicPartition(dlq_topic, p, ends[(dlq_topic, p)][0]) for p in todo])
            deadline = time.monotonic() + self.timeout
            while todo:
                if time.monotonic() > deadline:
                    raise OpsError(f"reading {dlq_topic!r} to its end took over {self.timeout:g}s")
                for msg in reader.consume(1000, 0.2):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            todo.pop(msg.partition(), None)
                        continue
                    if msg.offset() + 1 >= todo.get(msg.partition(), 0):
                        todo.pop(msg.partition(), None)
                    headers = _last_headers(msg.headers())
                    if (
                        headers.get(DlqHeader.GROUP) == want_group
                        and headers.get(DlqHeader.SOURCE_TOPIC) == want_topic
                    ):
                        source = int(headers.get(DlqHeader.SOURCE_PARTITION, b"-1"))
                        counts[source] = counts.get(source, 0) + 1
        finally:
            reader.close()
        return counts

    def visible_offsets(
        self, topic: str, partition: int, start: int, end: int
    ) -> tuple[list[int], int]:
        """Offsets in ``[start, end)`` that hold a record a read-committed consumer sees.

        :returns: the offsets found and the offset below which the read is complete (``end``,
            or less when an open transaction or the timeout stopped it first).
        """
        seen: list[int] = []
        reader = self._reader(**{"fetch.max.bytes": 1 << 20})
        position = start
        try:
            reader.assign([TopicPartition(topic, partition, start)])
            deadline = time.monotonic() + self.timeout
            while position < end and time.monotonic() < deadline:
                for msg in reader.consume(1000, 0.2):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            # The read-committed end: nothing visible below it was skipped.
                            return seen, min(max(position, msg.offset()), end)
                        continue
                    if msg.offset() >= end:
                        return seen, end
                    seen.append(msg.offset())
                    position = msg.offset() + 1
        finally:
            reader.close()
        return seen, min(position, end)


def _last_headers(headers: list[tuple[str, bytes | None]] | None) -> dict[str, bytes]:
    """Header name -> its last value (a re-dead-lettered record carries older copies first)."""
    return {name: value for name, value in headers or () if value is not None}
