"""Tear-down is one path: whatever ``run()`` started is stopped on every exit (issue 24, defect 8).

- An exception escaping the poll loop must end the member's ZooKeeper session: a library
  process that catches it and builds a new consumer would otherwise keep the old member's
  leases, lock, member and leader znodes for as long as it lives.
- A coordinator that fails to plug in must not leave the key-state store's threads running.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import keyshared
from coordinator import ZooKeeperCoordinator
from coordinator.errors import CoordinatorUnreachable
from keyshared.kafka import backpressure
from tests.coordinator.conftest import NAMESPACE, WAIT_S, closed_port
from tests.helpers import wait_until
from tests.kafka.support.inprocess import run_on_thread
from tests.kafka.support.journal import produce


class Boom(RuntimeError):
    """The fault injected into the poll loop."""


@pytest.fixture
def admin(zookeeper_hosts: str) -> Iterator[ZooKeeperCoordinator]:
    with ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE) as zk:
        yield zk


def test_an_exception_escaping_the_poll_loop_ends_the_zookeeper_session(
    admin: ZooKeeperCoordinator,
    zookeeper_hosts: str,
    kafka_bootstrap: str,
    new_topic: object,
    new_group: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("teardown")  # type: ignore[operator]
    produce(kafka_bootstrap, topic, [(b"k", 1)])
    handled = threading.Event()
    fail = threading.Event()
    original = backpressure.Backpressure.apply

    def apply(self: backpressure.Backpressure, *args: Any) -> None:
        if fail.is_set():
            raise Boom("injected into the poll loop")
        original(self, *args)

    monkeypatch.setattr(backpressure.Backpressure, "apply", apply)
    zk = ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE, session_timeout=30.0)
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group, "client.id": "M"},
        [topic],
        lambda record: handled.set(),
        coordinator=zk,
        mode="key_shared",
        commit_interval=0.1,
    )
    thread, errors = run_on_thread(consumer)
    try:
        assert handled.wait(WAIT_S * 2), "the member never ran its record"
        assert admin.status(group).members, "the member is not in ZooKeeper"
        fail.set()
        thread.join(WAIT_S * 2)
        assert not thread.is_alive(), "run() did not end after the poll loop failed"
        assert errors and isinstance(errors[0], Boom), errors
        status = admin.status(group)
        assert not status.members and not status.leases and status.leader is None, (
            f"the member's session outlived its run: {status.members}, {status.leases}"
        )
    finally:
        consumer.stop()
        thread.join(WAIT_S)
        zk.close()


def test_a_coordinator_that_fails_to_plug_in_leaves_no_key_state_threads(
    kafka_bootstrap: str, new_topic: object, new_group: object
) -> None:
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("teardown-plug")  # type: ignore[operator]
    before = {t.ident for t in threading.enumerate()}
    unreachable = ZooKeeperCoordinator(f"127.0.0.1:{closed_port()}", connect_timeout=1.0)
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group},
        [topic],
        lambda record: None,
        coordinator=unreachable,
        mode="key_shared",
        poison="park",
    )
    with pytest.raises(CoordinatorUnreachable):
        consumer.run()

    def leaked() -> list[str]:
        return [
            t.name
            for t in threading.enumerate()
            if t.ident not in before and t.name.startswith("keyshared") and t.is_alive()
        ]

    wait_until(lambda: not leaked(), "the consumer's threads to end", WAIT_S)
