"""pytest fixtures over `keyshared.testing.kafka_cluster`, for the tests of your own handlers.

Opt in from your ``conftest.py`` (it is not auto-loaded: installing keyshared must not add
fixtures, or start servers, in projects that did not ask)::

    pytest_plugins = ["keyshared.testing.plugin"]

then::

    def test_my_handler(keyshared_cluster, keyshared_topic):
        topic = keyshared_topic(partitions=3)
        config = {"bootstrap.servers": keyshared_cluster.bootstrap_servers, "group.id": "t"}
        ...

The cluster is started on first use, once per session, and stopped at its end; the backend
is chosen as `kafka_cluster` chooses it (``$KEYSHARED_TEST_BACKEND``, default ``auto``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from keyshared.dev.topics import TopicFactory, topic_factory
from keyshared.testing import KafkaCluster, kafka_cluster

__all__ = ["keyshared_cluster", "keyshared_topic"]


@pytest.fixture(scope="session")
def keyshared_cluster() -> Iterator[KafkaCluster]:
    """Kafka + ZooKeeper for the whole session (see `keyshared.testing`)."""
    with kafka_cluster() as cluster:
        yield cluster


@pytest.fixture
def keyshared_topic(keyshared_cluster: KafkaCluster) -> Iterator[TopicFactory]:
    """Factory: ``keyshared_topic(partitions=3, config={...}) -> name``, usable when returned.

    Each name is new (no test sees another's records); the topics are deleted after the test.
    """
    yield from topic_factory(keyshared_cluster.bootstrap_servers)
