"""Unique names, and topics that are ready when returned, on a real broker.

Used by the demo, the bench, the public pytest plugin (`keyshared.testing.plugin`) and the
project's own fixtures (`tests/conftest.py`: `new_topic`, `new_group`); not test-only, hence not
under `tests/`. Every test gets its own topics and groups (names are random), so tests never
see each other's records or offsets even on one shared broker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

__all__ = [
    "GroupFactory",
    "TopicFactory",
    "create_topic",
    "delete_topics",
    "topic_factory",
    "unique_name",
]


class TopicFactory(Protocol):
    """The `new_topic` fixture: create a fresh topic, return its name once it is usable."""

    def __call__(
        self,
        partitions: int = 3,
        config: Mapping[str, str] | None = None,
        *,
        prefix: str = "topic",
    ) -> str: ...


class GroupFactory(Protocol):
    """The `new_group` fixture: a fresh consumer group id."""

    def __call__(self, prefix: str = "group") -> str: ...


def unique_name(prefix: str) -> str:
    """`prefix` plus 12 random hex digits: a topic or group name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def create_topic(
    admin: AdminClient,
    name: str,
    partitions: int = 3,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    *,
    replication_factor: int = 1,
) -> None:
    """Create topic `name` and wait until every partition has a leader.

    CreateTopics returns before the broker has elected leaders; producing in that window
    fails or stalls, so a test would have to sleep. This waits on the metadata instead.

    :param replication_factor: replicas per partition (-1: the broker's
        `default.replication.factor`; a `TopologyCluster`'s is 3 with 3 brokers).
    :raises KafkaException: the broker refused the topic (the error names it).
    :raises TimeoutError: leaders did not appear within `timeout` seconds.
    """
    new = NewTopic(
        name,
        num_partitions=partitions,
        replication_factor=replication_factor,
        config=dict(config or {}),
    )
    admin.create_topics([new], operation_timeout=timeout)[name].result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic=name, timeout=5.0).topics.get(name)
        if (
            metadata is not None
            and metadata.error is None
            and len(metadata.partitions) == partitions
            and all(p.leader >= 0 and p.error is None for p in metadata.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {name!r}: partitions got no leader within {timeout:.0f} s")


def delete_topics(admin: AdminClient, names: Iterable[str], timeout: float = 10.0) -> None:
    """Delete topics, best effort: a test's clean-up must not fail the test."""
    names = list(names)
    if not names:
        return
    for future in admin.delete_topics(names, operation_timeout=timeout).values():
        try:
            future.result(timeout=timeout)
        except (KafkaException, TimeoutError):
            continue


def topic_factory(bootstrap_servers: str) -> Iterator[TopicFactory]:
    """The body of a pytest fixture: yields ``make(partitions=3, config={...}) -> name`` (a new
    name each time, the topic ready when returned) and deletes the topics afterwards."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    created: list[str] = []

    def make(
        partitions: int = 3, config: Mapping[str, str] | None = None, *, prefix: str = "topic"
    ) -> str:
        name = unique_name(prefix)
        create_topic(admin, name, partitions, config)
        created.append(name)
        return name

    yield make
    delete_topics(admin, created)
