"""After an exactly-once redo, a hand-back still waits for every call of the partition.

The redo replaces a partition's state; the exclusive member (like partition leases) knew the
state it activated. A shutdown whose drain times out then handed back the lock while the
replacement state's call still ran, and the standby ran the same record beside it. The
hand-back now waits for the dispatcher's stragglers of the partition too.

The redo is caused by one transaction that fails (the test fails ``a``'s next commit, which
aborts it). A fence would not do here: in exclusive mode with ZooKeeper the producer belongs to
the active role, and a fenced one gives the role up instead of redoing.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from coordinator import ZooKeeperCoordinator
from keyshared import KeySharedConsumer
from keyshared.kafka.transactions import TransactionalCommitter
from tests.coordinator.conftest import NAMESPACE
from tests.kafka.support.journal import produce, wait_for
from tests.kafka.test_exactly_once import _committed_to_end

SLOW_SECONDS = 6.0


class Said(logging.Handler):
    """Sets ``event`` when a log message contains ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


def fail_next_commit_of(client_id: str, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Once the returned event is set, ``client_id``'s next ``commit_transaction`` fails with
    an abortable error, as a broker that lost the transaction's state would make it."""
    armed = threading.Event()
    original = TransactionalCommitter._commit

    def commit(committer: TransactionalCommitter) -> None:
        if committer._producer_config.get("client.id") == client_id and armed.is_set():
            armed.clear()
            raise KafkaException(
                KafkaError(KafkaError._STATE, "injected by the test", txn_requires_abort=True)
            )
        original(committer)

    monkeypatch.setattr(TransactionalCommitter, "_commit", commit)
    return armed


def test_a_shutdown_after_a_redo_keeps_the_lock_until_the_slow_call_ends(
    kafka_bootstrap: str, zookeeper_hosts: str, new_topic: Any, new_group: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    source = new_topic(partitions=1)
    out = new_topic(partitions=1)
    group = new_group("eos-redo-handback")
    fail_a = fail_next_commit_of("a", monkeypatch)
    calls: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
    slow_started = {"a": threading.Event(), "b": threading.Event()}

    def handler(name: str):  # type: ignore[no-untyped-def]
        def handle(record) -> None:  # type: ignore[no-untyped-def]
            start = time.monotonic()
            if record.raw_key == b"slow":
                slow_started[name].set()
                time.sleep(SLOW_SECONDS)
                calls[name].append((start, time.monotonic()))
            record.output.produce(out, key=record.raw_key, value=record.value)

        return handle

    def member(name: str) -> KeySharedConsumer:
        return KeySharedConsumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": group, "client.id": name},
            [source],
            handler(name),
            coordinator=ZooKeeperCoordinator(
                zookeeper_hosts, namespace=NAMESPACE, session_timeout=5
            ),
            mode="exclusive",
            poison="block",
            workers=4,
            exactly_once=True,
            commit_interval=0.2,
            drain_timeout=1.0,
        )

    redone = Said("redoing the records")
    logging.getLogger("keyshared.kafka.transactions").addHandler(redone)
    a, b = member("a"), member("b")
    threads = {"a": threading.Thread(target=a.run, daemon=True)}
    threads["a"].start()
    try:
        produce(kafka_bootstrap, source, [(b"k", i) for i in range(20)])
        _committed_to_end(kafka_bootstrap, group, source, 60)
        threads["b"] = threading.Thread(target=b.run, daemon=True)
        threads["b"].start()  # the standby
        fail_a.set()
        produce(kafka_bootstrap, source, [(b"k", 20)])  # a transaction to fail: the redo
        wait_for(redone.event.is_set, 60, "a's redo")
        produce(kafka_bootstrap, source, [(b"slow", 1)])
        wait_for(slow_started["a"].is_set, 60, "a to start the slow record")
        a.stop()  # the drain times out after 1 s; the slow call goes on
        wait_for(slow_started["b"].is_set, 90, "b to take over the slow record")
        _committed_to_end(kafka_bootstrap, group, source, 60)
    finally:
        logging.getLogger("keyshared.kafka.transactions").removeHandler(redone)
        a.stop()
        b.stop()
        for thread in threads.values():
            thread.join(30)
    assert calls["a"], "a's slow call never ended"
    a_end = calls["a"][0][1]
    b_start = calls["b"][0][0]
    assert b_start >= a_end, (
        f"b started the slow record {a_end - b_start:.2f} s before a's call ended"
    )
