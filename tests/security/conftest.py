"""A second local broker whose only client listener requires SASL/PLAIN, for the whole session.

The session's main broker is PLAINTEXT, so it cannot show that a client was built without the
security settings: it would simply answer. This broker refuses every unauthenticated client,
so each Kafka client keyshared creates either got the credentials or fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka.admin import AdminClient

from keyshared.dev import LocalCluster
from keyshared.dev.topics import create_topic, unique_name

ADMIN, ADMIN_PASSWORD = "keyshared-admin", "admin-secret"
USER, PASSWORD = "alice", "alice-secret"


@dataclass(frozen=True)
class SaslBroker:
    """The SASL broker's address and the client configs to reach it."""

    bootstrap: str
    credentials: dict[str, str]  # security.protocol, sasl.* of the test user

    @property
    def config(self) -> dict[str, str]:
        """A full client config: bootstrap servers and credentials."""
        return {"bootstrap.servers": self.bootstrap, **self.credentials}

    def properties(self) -> list[str]:
        """The credentials as ``-X name=value`` arguments of a ``keyshared`` command."""
        return [arg for k, v in self.credentials.items() for arg in ("-X", f"{k}={v}")]

    def new_topic(self, partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = unique_name("sasl")
        admin = AdminClient(self.config)
        create_topic(admin, name, partitions, config)
        return name


@pytest.fixture(scope="session")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    """A LocalCluster whose broker requires SASL/PLAIN (users ``keyshared-admin``, ``alice``)."""
    cluster = LocalCluster(
        tmp_path_factory.mktemp("keyshared-sasl"),
        sasl_users={ADMIN: ADMIN_PASSWORD, USER: PASSWORD},
        sasl_acls=True,
        kafka_heap_mb=512,
        zookeeper_heap_mb=128,
    )
    try:
        cluster.up()
        config = cluster.client_config(USER)
        bootstrap = config.pop("bootstrap.servers")
        yield SaslBroker(bootstrap, config)
    finally:
        cluster.down()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test on the SASL broker is an integration test, like one on the session's broker."""
    for item in items:
        if "sasl_broker" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
