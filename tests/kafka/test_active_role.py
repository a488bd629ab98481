"""The active role's producer without a broker: which ``init_transactions`` failures stop the
run (the broker refuses the role to every member alike) and which are tried again, and that a
failed activation leaves nothing active.

The real-broker tests (``tests/coordinator/test_exactly_once_role_failures.py``) run the same
paths through members contending for the ZooKeeper lock.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given
from hypothesis import strategies as st

from keyshared.core.window import InFlightWindow
from keyshared.errors import ConfigurationError
from keyshared.kafka import transactions
from keyshared.kafka.active_role import init_refused_for_good
from keyshared.kafka.transactions import TransactionalCommitter
from keyshared.metrics import ConsumerMetrics
from keyshared.runtime.dispatcher import Dispatcher
from keyshared.runtime.partition import PartitionState
from keyshared.settings import ConsumerOptions
from tests.kafka.test_transactions import FakeConsumer, FakeProducer, _finish

TXN_ID = "keyshared-orders-active"
NOT_AUTHORIZED = [
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
]
TRY_AGAIN = [
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.CONCURRENT_TRANSACTIONS,
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
]
flags = st.fixed_dictionaries(
    {"fatal": st.booleans(), "retriable": st.booleans(), "txn_requires_abort": st.booleans()}
)


def _failure(code: int, **flags: bool) -> KafkaException:
    return KafkaException(KafkaError(code, "injected", **flags))


@given(st.sampled_from(NOT_AUTHORIZED), flags)
def test_an_authorization_failure_stops_the_run_whatever_its_flags(
    code: int, flags: dict[str, bool]
) -> None:
    refused = init_refused_for_good(_failure(code, **flags), TXN_ID)
    assert isinstance(refused, ConfigurationError)
    assert TXN_ID in str(refused) and KafkaError(code).name() in str(refused)
    assert "grant" in str(refused)


@given(st.sampled_from(TRY_AGAIN), flags)
def test_a_fence_or_a_broker_away_is_tried_again_whatever_its_flags(
    code: int, flags: dict[str, bool]
) -> None:
    assert init_refused_for_good(_failure(code, **flags), TXN_ID) is None


@given(
    st.sampled_from(
        [
            KafkaError.UNSUPPORTED_VERSION,
            KafkaError.INVALID_TRANSACTION_TIMEOUT,
            KafkaError._INCONSISTENT,
            KafkaError._NOT_CONFIGURED,
        ]
    ),
    st.booleans(),
)
def test_any_other_error_librdkafka_will_not_retry_stops_the_run(code: int, fatal: bool) -> None:
    refused = init_refused_for_good(_failure(code, fatal=fatal), TXN_ID)
    assert isinstance(refused, ConfigurationError) and TXN_ID in str(refused)
    assert init_refused_for_good(_failure(code, retriable=True), TXN_ID) is None


class Role:
    """The exclusive member's side of the role: always held; counts the lock checks."""

    def __init__(self) -> None:
        self.checks = 0
        self.given_up = 0

    def still_held(self) -> bool:
        self.checks += 1
        return True

    def fenced(self) -> None:
        self.given_up += 1


@pytest.fixture
def role_desk(monkeypatch: pytest.MonkeyPatch) -> tuple[TransactionalCommitter, Role, Any]:
    monkeypatch.setattr(transactions, "Producer", FakeProducer)
    FakeProducer.instances = []
    metrics = ConsumerMetrics(f"g-{uuid.uuid4().hex[:8]}", "m")
    state = PartitionState("t", 0, metrics.partition("t", 0), committed=0)
    state.window = InFlightWindow(start_offset=0, max_window=100, per_worker_capacity=100)
    committer = TransactionalCommitter(
        FakeConsumer(),  # type: ignore[arg-type]
        metrics,
        Dispatcher(ConsumerOptions(), 1, lambda _w, _works: None),
        {"transactional.id": TXN_ID},
        role=True,
    )
    role = Role()
    committer.serve_role(role)
    return committer, role, state


def _init_fails(monkeypatch: pytest.MonkeyPatch, error: KafkaError) -> None:
    def refuse(self: FakeProducer, timeout: float) -> None:
        raise KafkaException(error)

    monkeypatch.setattr(FakeProducer, "init_transactions", refuse)


def test_a_role_the_broker_refuses_for_good_raises_a_configuration_error_naming_the_id(
    role_desk: tuple[TransactionalCommitter, Role, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the KafkaException went to the member, which gave the lock up; every member
    won it in turn and failed alike, for ever."""
    committer, _, _ = role_desk
    error = KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "denied", fatal=True)
    _init_fails(monkeypatch, error)
    with pytest.raises(ConfigurationError, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED") as info:
        committer.activate()
    assert TXN_ID in str(info.value) and info.value.option == "transactional.id"
    assert committer._producer is None and not committer._active


def test_an_activation_whose_init_fails_leaves_nothing_active(
    role_desk: tuple[TransactionalCommitter, Role, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``_active`` stayed set after the failed init until the member gave the role up,
    so a commit in between rebuilt the role's producer (an init, a lock read) for a member
    that was not active."""
    committer, role, state = role_desk
    _init_fails(monkeypatch, KafkaError(KafkaError._TIMED_OUT, "no answer", retriable=True))
    with pytest.raises(KafkaException):
        committer.activate()
    assert not committer._active
    checks, producers = role.checks, len(FakeProducer.instances)
    _finish(state, 0)
    committer.commit_async([state])
    assert committer.commit_sync([state])  # nothing of a standby's to commit
    assert (role.checks, len(FakeProducer.instances)) == (checks, producers)


def test_a_rebuild_the_broker_refuses_for_good_stops_the_run_out_of_the_commit(
    role_desk: tuple[TransactionalCommitter, Role, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ACL withdrawn while active: the producer's rebuild after a failed transaction meets
    the refusal. The error leaves the commit (and so the poll loop: the run stops with it)
    instead of a warning repeated at every commit interval."""
    committer, _, state = role_desk
    committer.activate()
    committer._producer = None  # a failed transaction gave it up
    error = KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "denied", fatal=True)
    _init_fails(monkeypatch, error)
    _finish(state, 0)
    with pytest.raises(ConfigurationError, match=TXN_ID):
        committer.commit_async([state])
