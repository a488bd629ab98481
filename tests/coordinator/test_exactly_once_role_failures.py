"""The active role's producer against failures of the broker and of ZooKeeper (exclusive mode,
exactly-once, real Kafka and ZooKeeper).

- The broker refuses the role's ``transactional.id`` for good (an ACL missing): every member
  won the lock, failed its producer's init, gave the lock up, and the next one did the same,
  for ever. Now each member's run stops with a ``ConfigurationError`` naming the id. The
  refusal is injected into ``init_transactions``: the test broker runs without an authorizer.
- The ZooKeeper connection drops during the init of the role's producer and comes back within
  the session: the lock check after the init answered "not held" at once, and the member gave
  the role up (a fail-over, every uncommitted record redone). Now it waits for the connection.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from kazoo.client import KazooState

from keyshared.errors import ConfigurationError
from keyshared.kafka import transactions
from keyshared.kafka.active_role import active_role_transactional_id
from keyshared.kafka.transactions import TransactionalCommitter
from keyshared.modes.exclusive import ExclusiveMember
from tests.coordinator.conftest import WAIT_S
from tests.coordinator.members import StartMember, members_for
from tests.coordinator.zk_proxy import ZooKeeperProxy
from tests.helpers import wait_until
from tests.kafka.support.journal import produce


class RefusedProducer:
    """A producer whose ``init_transactions`` the broker refuses as it does without the ACL."""

    inits = 0

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def init_transactions(self, timeout: float) -> None:
        RefusedProducer.inits += 1
        raise KafkaException(
            KafkaError(
                KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "Failed to acquire transactional PID from broker: Broker: Transactional Id "
                "authorization failed",
                fatal=True,
            )
        )

    def purge(self) -> None:
        pass


def test_a_role_the_broker_refuses_stops_every_member_with_a_configuration_error(
    start: StartMember,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the members took turns winning the lock and failing, and no run ever ended."""
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("role-refused")  # type: ignore[operator]
    RefusedProducer.inits = 0
    monkeypatch.setattr(transactions, "Producer", RefusedProducer)
    runs = [
        start(group, topic, lambda record: None, member=name, mode="exclusive", exactly_once=True)
        for name in ("a", "b")
    ]
    wait_until(
        lambda: all(run.error is not None for run in runs),
        "every member to stop on the refused role",
        WAIT_S * 2,
    )
    for run in runs:
        assert isinstance(run.error, ConfigurationError), run.error
        assert active_role_transactional_id(group) in str(run.error)
        assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in str(run.error)
    assert RefusedProducer.inits == 2  # one try each, no round after round


@pytest.fixture
def proxy(zookeeper_hosts: str) -> Iterator[ZooKeeperProxy]:
    p = ZooKeeperProxy(zookeeper_hosts)
    yield p
    p.close()


def test_a_connection_blip_during_the_role_producers_init_keeps_the_role(
    kafka_bootstrap: str,
    proxy: ZooKeeperProxy,
    new_topic: object,
    new_group: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the check after the init found the session suspended and gave the lock up;
    the member won it again with a second lock and a second init."""
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("role-blip")  # type: ignore[operator]
    produce(kafka_bootstrap, topic, [(b"k", 1)])
    inits: list[int] = []
    started = threading.Event()
    member: list[ExclusiveMember] = []
    original = TransactionalCommitter._new_producer

    def new_producer(committer: TransactionalCommitter) -> Any:
        """The first init runs with the ZooKeeper connection cut, restored before it ends."""
        inits.append(1)
        if len(inits) == 1 and started.wait(WAIT_S):
            gate = member[0]._gate
            proxy.cut()
            wait_until(lambda: gate.suspended, "the member to see its connection drop", WAIT_S)
            proxy.restore()
        return original(committer)

    monkeypatch.setattr(TransactionalCommitter, "_new_producer", new_producer)
    handled = threading.Event()
    members = members_for(kafka_bootstrap, proxy.hosts)
    start = next(members)
    try:
        run = start(group, topic, lambda record: handled.set(), member="a", mode="exclusive",
                    exactly_once=True, session_timeout=10.0)  # fmt: skip
        loop = run.consumer._parts.loop
        assert loop is not None
        member.append(loop.membership)  # type: ignore[arg-type]
        started.set()
        assert handled.wait(WAIT_S * 2), "the member never became active"
        zk = run.zk  # type: ignore[attr-defined]
        wait_until(lambda: zk.client.state == KazooState.CONNECTED, "ZooKeeper back", WAIT_S)
        assert len(inits) == 1, "the member gave the role up over a connection blip"
        assert run.error is None
    finally:
        started.set()
        for _ in members:
            pass
