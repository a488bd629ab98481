"""A failure while taking up a lease or the lock does not orphan it (issue 24, defect 6).

- ``exclusive``: the key-state read of an activation times out. The member held the lock and
  processed nothing, and every standby waited behind it for good; now it gives the lock up and
  stands by again.
- ``exclusive``: Kafka does not answer the activation's read of the committed offsets in time
  (a rolling restart, a stale coordinator). The member stopped itself, leaving the group one
  member short; now it gives the lock up and stands by again (a missing topic still stops it).
- partition leases: ``seek()`` raises at the grant (the fetcher had not started). The lease was
  neither used nor released; now the start is retried.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from keyshared.kafka.commits import Committer
from keyshared.kafka.keystate import KeyStateStore
from keyshared.kafka.keystate.errors import KeyStateError
from keyshared.modes import partition_leases
from tests.coordinator.conftest import WAIT_S
from tests.coordinator.members import StartMember
from tests.kafka.support.journal import produce


def _fail_once(
    monkeypatch: pytest.MonkeyPatch, owner: type, name: str, error: Exception
) -> threading.Event:
    """``owner.name`` raises ``error`` on its first call, then works; the event says it did."""
    original = getattr(owner, name)
    failed = threading.Event()

    def patched(self: object, *args: Any, **kwargs: Any) -> Any:
        if not failed.is_set():
            failed.set()
            raise error
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, patched)
    return failed


@pytest.mark.parametrize(
    ("owner", "name", "error", "options"),
    [
        pytest.param(
            KeyStateStore,
            "load",
            KeyStateError("injected: reading the key state timed out"),
            {"poison": "block"},
            id="key-state-read",
        ),
        pytest.param(
            Committer,
            "starting_points",
            KafkaException(KafkaError(KafkaError._TIMED_OUT, "injected: no answer")),
            {},
            id="committed-offsets-read",
        ),
    ],
)
def test_an_activation_that_fails_gives_the_lock_up_and_tries_again(
    owner: type,
    name: str,
    error: Exception,
    options: dict[str, Any],
    start: StartMember,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the key-state case held the lock processing nothing; the committed-offsets
    case stopped the member."""
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("activation")  # type: ignore[operator]
    produce(kafka_bootstrap, topic, [(b"k", 1)])
    failed = _fail_once(monkeypatch, owner, name, error)
    handled = threading.Event()
    run = start(group, topic, lambda record: handled.set(), mode="exclusive", **options)
    assert handled.wait(WAIT_S * 2), "the member did not activate after a failed activation"
    assert failed.is_set()
    assert run.error is None


def test_a_grant_whose_seek_fails_is_started_again(
    start: StartMember,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("grant-seek")  # type: ignore[operator]
    produce(kafka_bootstrap, topic, [(b"k", 1)])
    real = partition_leases.TopicPartition
    failed = threading.Event()

    def topic_partition(*args: Any) -> Any:
        if len(args) == 3 and not failed.is_set():  # the one _start() seeks to
            failed.set()
            raise KafkaException(KafkaError(KafkaError._STATE, "injected: fetcher not started"))
        return real(*args)

    monkeypatch.setattr(partition_leases, "TopicPartition", topic_partition)
    handled = threading.Event()
    start(group, topic, lambda record: handled.set(), mode="partition")
    assert handled.wait(WAIT_S * 2), "the granted lease was neither used nor released"
    assert failed.is_set()
