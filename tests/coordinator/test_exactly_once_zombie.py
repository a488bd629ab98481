"""Exclusive mode with ZooKeeper fences a zombie's transaction at the broker (issue 36, D2).

Exclusive members read with ``assign()``: their offsets go out with generation -1, which the
broker never checks, so the lock check before a commit was the only fence, and it is
check-then-act. Here the active member stalls inside its commit, after that check, with the
outputs of its last records in an open transaction; its session expires and the standby takes
over and commits the same records. When the stalled member goes on, its transaction must be
refused: a ``read_committed`` reader sees every output once.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from coordinator import ZooKeeperCoordinator
from keyshared import KeySharedConsumer
from keyshared.errors import ConfigurationError
from keyshared.kafka.transactions import TransactionalCommitter
from tests.coordinator.conftest import NAMESPACE, WAIT_S, expire_session
from tests.helpers import wait_until
from tests.kafka.support.journal import produce, wait_committed_to_end
from tests.kafka.test_exactly_once import assert_exactly_once, expected_outputs, read_committed


class Stall:
    """Holds member ``a``'s next ``send_offsets_to_transaction`` once armed: the moment after
    its lock check, with its outputs produced in the open transaction."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.stalled = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()
        self.outcome: list[BaseException | None] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = TransactionalCommitter._send_offsets
        stall = self

        def send_offsets(committer: TransactionalCommitter, offsets: Any) -> None:
            mine = committer._producer_config.get("client.id") == "a"
            if not (mine and stall.armed.is_set() and not stall.stalled.is_set()):
                original(committer, offsets)
                return
            stall.stalled.set()
            stall.release.wait(WAIT_S * 4)
            try:
                original(committer, offsets)
            except BaseException as exc:
                stall.outcome.append(exc)
                raise
            else:
                stall.outcome.append(None)
            finally:
                stall.done.set()

        monkeypatch.setattr(TransactionalCommitter, "_send_offsets", send_offsets)


def test_a_stalled_active_member_cannot_commit_after_the_standby_took_over(
    kafka_bootstrap: str,
    zookeeper_hosts: str,
    new_topic: Any,
    new_group: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = new_topic(partitions=1)
    out = new_topic(partitions=1)
    group = new_group("eos-zombie")
    keys = [f"k{i}".encode() for i in range(5)]
    first = [(k, s) for s in range(1, 5) for k in keys]
    second = [(k, s) for s in range(5, 9) for k in keys]
    stall = Stall()
    stall.install(monkeypatch)

    def handle(record: Any) -> None:
        record.output.produce(out, key=record.raw_key, value=record.value)

    coordinators = {
        name: ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE, session_timeout=5)
        for name in ("a", "b")
    }

    def member(name: str) -> KeySharedConsumer:
        return KeySharedConsumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": group, "client.id": name},
            [source],
            handle,
            coordinator=coordinators[name],
            mode="exclusive",
            poison="block",
            workers=4,
            exactly_once=True,
            commit_interval=0.2,
            # Before the fix the broker would end the stalled transaction itself after 10 s
            # (and so refuse it, hiding the defect) had the stall lasted that long.
            transaction_timeout=120.0,
        )

    a, b = member("a"), member("b")
    threads = [threading.Thread(target=m.run, daemon=True) for m in (a, b)]
    observer = ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE)
    observer.start()
    try:
        threads[0].start()
        produce(kafka_bootstrap, source, first)
        wait_committed_to_end(kafka_bootstrap, group, source, WAIT_S)
        threads[1].start()
        active_dir = observer.layout(group).active
        wait_until(lambda: len(observer.client.get_children(active_dir)) == 2, "b to queue", WAIT_S)
        stall.armed.set()
        produce(kafka_bootstrap, source, second)
        assert stall.stalled.wait(WAIT_S), "a never committed the second records"
        # a stalls with part of them in its open transaction; its session goes, b takes over
        # and commits all of them.
        expire_session(coordinators["a"].client, zookeeper_hosts)
        wait_committed_to_end(kafka_bootstrap, group, source, WAIT_S)
        stall.release.set()
        assert stall.done.wait(WAIT_S), "a's stalled commit never went on"
    finally:
        stall.release.set()
        a.stop()
        b.stop()
        for thread in threads:
            if thread.is_alive():
                thread.join(30)
        observer.close()
    assert_exactly_once(
        read_committed(kafka_bootstrap, out, len(first) + len(second)),
        expected_outputs(first + second),
    )
    assert stall.outcome and stall.outcome[0] is not None, "the zombie's transaction went through"


def test_exclusive_mode_with_a_coordinator_refuses_a_transactional_id() -> None:
    """Per-member ids would leave the zombie unfenced: the role's id is the group's."""
    with pytest.raises(ConfigurationError, match="transactional_id"):
        KeySharedConsumer(
            {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"},
            ["t"],
            lambda r: None,
            coordinator=ZooKeeperCoordinator("127.0.0.1:1"),
            mode="exclusive",
            exactly_once=True,
            transactional_id="replica-1",
        )
