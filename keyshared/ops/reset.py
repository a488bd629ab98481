"""Rewind or skip a stopped group's position in a topic, in every mode (``keyshared reset``).

A group's position lives in up to three places, and a reset must move all of them or the one
left behind wins:

- Kafka's committed offsets (partition and exclusive modes read them; ``key_shared`` commits
  its low watermark there), with keyshared's **finished-offsets metadata**: a reset commits
  with empty metadata, or a rewind would skip the records the old metadata calls finished;
- in ``key_shared`` mode, the **range cursors** in ZooKeeper, which win over Kafka's offsets:
  the topic's record (:mod:`coordinator.incarnations`) gets a new epoch for each partition
  reset, so every cursor written before stops counting, and they are deleted.

A reset of a running group would be undone by its members' next commits, so it is refused
while any member is live: a ZooKeeper member, partition-lease or exclusive-lock znode of the
group, or a member of the Kafka group. (A member starting between the check and the reset is
not excluded; stop the deployment first.)

Example::

    resetter = Resetter({"bootstrap.servers": "127.0.0.1:9092"}, timeout=15.0, zk=client)
    plan = resetter.plan("billing", "orders", Target.earliest())
    resetter.apply(plan)   # raises GroupBusy naming the live members
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicCollection
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError

from coordinator.cursors import Cursor, read_cursors
from coordinator.incarnations import TopicRecords
from coordinator.layout import DEFAULT_NAMESPACE, GroupLayout, decode_name
from keyshared.kafka.client_config import client_properties
from keyshared.ops.admin import GroupReader, OpsError

__all__ = ["GroupBusy", "ResetPlan", "Resetter", "Target"]


class GroupBusy(OpsError):
    """Members of the group are live: a reset now would be undone by their commits."""

    def __init__(self, group: str, live: list[str]) -> None:
        self.live = live
        super().__init__(f"group {group!r} has live members, stop them first: {', '.join(live)}")


@dataclass(frozen=True)
class Target:
    """Where to: ``earliest``, ``latest``, the first record at or after ``when``, or
    ``offsets`` per partition (the partitions not named are left as they are)."""

    kind: str
    when: datetime | None = None
    offsets: Mapping[int, int] = field(default_factory=dict)

    @staticmethod
    def earliest() -> Target:
        return Target("earliest")

    @staticmethod
    def latest() -> Target:
        return Target("latest")

    @staticmethod
    def at(when: datetime) -> Target:
        return Target("datetime", when=when)

    @staticmethod
    def to(offsets: Mapping[int, int]) -> Target:
        return Target("offsets", offsets=dict(offsets))


@dataclass(frozen=True)
class ResetPlan:
    """What :meth:`Resetter.apply` will do.

    :param before: partition -> the group's committed offset now (-1: none).
    :param after: partition -> the new offset (clamped to the partition's records).
    :param cursors: ZooKeeper cursors of the reset partitions, which stop counting.
    """

    group: str
    topic: str
    topic_id: str
    partitions: int
    before: Mapping[int, int]
    after: Mapping[int, int]
    cursors: tuple[Cursor, ...] = ()


class Resetter:
    """Plans and applies resets (see the module docstring).

    :param config: client properties (bootstrap servers, security).
    :param timeout: bound of each Kafka request.
    :param zk: a started kazoo client, or None for a group without coordinator.
    :param namespace: the coordinator's namespace.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        timeout: float,
        zk: KazooClient | None = None,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        self._config = {"log_level": 2, **client_properties(config)}
        self._reader = GroupReader(config, timeout)
        self._admin = AdminClient(self._config)
        self._timeout = timeout
        self._zk = zk
        self._namespace = namespace

    def live_members(self, group: str) -> list[str]:
        """Who holds the group now: ZooKeeper members, partition leases, exclusive-lock
        contenders, and the Kafka group's members."""
        live: list[str] = []
        if self._zk is not None:
            layout = GroupLayout(group, self._namespace)
            with contextlib.suppress(NoNodeError):
                live += [
                    f"{decode_name(n)} (key_shared)" for n in self._zk.get_children(layout.members)
                ]
            live += self._holders(layout.partition_leases, "partition lease")
            live += self._holders(layout.active, "exclusive")
        info = self._reader.describe_group(group)
        live += [f"{m.client_id or m.member_id} (Kafka group, {info.state})" for m in info.members]
        return sorted(set(live))

    def _holders(self, directory: str, what: str) -> list[str]:
        assert self._zk is not None
        found = []
        with contextlib.suppress(NoNodeError):
            for name in self._zk.get_children(directory):
                with contextlib.suppress(NoNodeError):
                    data, _ = self._zk.get(f"{directory}/{name}")
                    found.append(f"{_holder(data) or name} ({what})")
        return found

    def plan(self, group: str, topic: str, target: Target) -> ResetPlan:
        """Where each partition of ``topic`` would go; reads only."""
        topic_id, count = self._describe(topic)
        bad = sorted(p for p in target.offsets if not 0 <= p < count)
        if bad:
            raise OpsError(f"topic {topic!r} has no partition {bad[0]} (it has {count})")
        partitions = sorted(target.offsets) if target.kind == "offsets" else list(range(count))
        ends = self._reader.watermarks((topic, p) for p in partitions)
        if target.kind == "earliest":
            after = {p: ends[(topic, p)][0] for p in partitions}
        elif target.kind == "latest":
            after = {p: ends[(topic, p)][1] for p in partitions}
        elif target.kind == "datetime":
            assert target.when is not None
            after = self._at(topic, partitions, target.when, ends)
        else:
            after = {
                p: min(max(target.offsets[p], ends[(topic, p)][0]), ends[(topic, p)][1])
                for p in partitions
            }
        committed = self._reader.committed(group)
        before = {p: committed.get((topic, p), (-1, None))[0] for p in partitions}
        cursors: tuple[Cursor, ...] = ()
        if self._zk is not None:
            layout = GroupLayout(group, self._namespace)
            with contextlib.suppress(NoNodeError):
                cursors = tuple(
                    c
                    for c in read_cursors(self._zk, layout)
                    if c.topic == topic and c.partition in after
                )
        return ResetPlan(group, topic, topic_id, count, before, after, cursors)

    def apply(self, plan: ResetPlan) -> None:
        """Refuse if a member is live; then Kafka's offsets (metadata cleared), the topic's
        record (the cursors stop counting) and the cursors themselves, in that order: if it
        stops half-way, the members' own rule (a Kafka offset the group did not commit means
        a reset) still drops the cursors."""
        live = self.live_members(plan.group)
        if live:
            raise GroupBusy(plan.group, live)
        offsets = [
            KafkaPartition(plan.topic, p, offset, metadata="") for p, offset in plan.after.items()
        ]
        request = [ConsumerGroupTopicPartitions(plan.group, offsets)]
        futures = self._admin.alter_consumer_group_offsets(request, request_timeout=self._timeout)
        try:
            result = futures[plan.group].result(timeout=self._timeout)
        except (KafkaException, TimeoutError) as exc:
            raise OpsError(f"committing the new offsets of {plan.group!r} failed: {exc}") from None
        failed = [tp for tp in result.topic_partitions or () if tp.error is not None]
        if failed:
            raise OpsError(
                f"committing {plan.topic}[{failed[0].partition}] failed: {failed[0].error}"
            )
        if self._zk is None:
            return
        layout = GroupLayout(plan.group, self._namespace)
        if self._zk.exists(layout.root) is None:
            return  # never coordinated through this ZooKeeper
        TopicRecords(self._zk, layout).reset(plan.topic, plan.topic_id, plan.partitions, plan.after)
        for cursor in plan.cursors:
            with contextlib.suppress(NoNodeError, BadVersionError):
                self._zk.delete(
                    layout.cursor(cursor.slots, cursor.topic, cursor.partition),
                    version=cursor.data_version,
                )
        for slots in {c.slots for c in plan.cursors}:
            with contextlib.suppress(NoNodeError, NotEmptyError):
                self._zk.delete(layout.cursor_range(slots))

    def _describe(self, topic: str) -> tuple[str, int]:
        futures = self._admin.describe_topics(
            TopicCollection([topic]), request_timeout=self._timeout
        )
        try:
            described = futures[topic].result(timeout=self._timeout)
        except (KafkaException, TimeoutError) as exc:
            raise OpsError(f"cannot describe topic {topic!r}: {exc}") from None
        return str(described.topic_id), len(described.partitions)

    def _at(
        self, topic: str, partitions: list[int], when: datetime, ends: Mapping[Any, tuple[int, int]]
    ) -> dict[int, int]:
        """The first offset at or after ``when`` per partition (the end if there is none)."""
        millis = int(when.timestamp() * 1000)
        spec = OffsetSpec.for_timestamp(millis)
        request = {KafkaPartition(topic, p): spec for p in partitions}
        found: dict[int, int] = {}
        try:
            futures = self._admin.list_offsets(request, request_timeout=self._timeout)
            for tp, future in futures.items():
                offset = future.result(self._timeout).offset
                found[tp.partition] = offset if offset >= 0 else ends[(topic, tp.partition)][1]
        except (KafkaException, TimeoutError) as exc:
            raise OpsError(f"cannot find the offsets of {topic!r} at {when}: {exc}") from None
        return found


def _holder(data: bytes) -> str:
    """The member named by a lease or lock znode's data (JSON ``member``, or plain text)."""
    text = data.decode("utf-8", "replace")
    with contextlib.suppress(ValueError, AttributeError):
        return str(json.loads(text).get("member", ""))
    return text
