"""Exactly-once settings checked at construction, without a broker: what would otherwise fail
inside ``run()`` (or silently weaken the guarantee) is a ``ConfigurationError`` naming the
property; and every client keyshared builds logs through Python logging."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from keyshared import KeySharedConsumer
from keyshared.errors import ConfigurationError
from keyshared.kafka.transactional_config import producer_config
from keyshared.kafka.transactions import transactional_store
from keyshared.settings import ConsumerOptions, build_kafka_config

UNREACHABLE = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}


def _consumer(config: dict[str, Any], **options: Any) -> KeySharedConsumer:
    consumer = KeySharedConsumer({**UNREACHABLE, **config}, ["t"], lambda r: None, **options)
    consumer._consumer.close()
    return consumer


@pytest.mark.parametrize("level", ["read_uncommitted", "READ_UNCOMMITTED"])
def test_exactly_once_refuses_read_uncommitted(level: str) -> None:
    with pytest.raises(ConfigurationError, match=r"'isolation\.level'.*read_committed"):
        _consumer({"isolation.level": level}, exactly_once=True)


def test_exactly_once_reads_committed_unless_told_otherwise() -> None:
    assert _consumer({}, exactly_once=True)._config["isolation.level"] == "read_committed"
    kept = _consumer({"isolation.level": "read_uncommitted"})  # at-least-once: the user's
    assert kept._config["isolation.level"] == "read_uncommitted"


def test_a_socket_timeout_the_transactional_producer_refuses_fails_at_construction() -> None:
    """librdkafka refuses a transactional producer whose socket.timeout.ms exceeds
    transaction.timeout.ms + 100; the producer inherits socket.* from the consumer config."""
    config = {"socket.timeout.ms": 30_000}
    with pytest.raises(ConfigurationError, match=r"'socket\.timeout\.ms'.*transaction_timeout"):
        _consumer(config, exactly_once=True)
    _consumer(config, exactly_once=True, transaction_timeout=30)  # raised with it: fine
    _consumer(config)  # no transactional producer: nothing to refuse


def test_a_property_the_transactional_producer_refuses_is_named() -> None:
    with pytest.raises(ConfigurationError, match=r"invalid option 'socket\.timeout\.ms'"):
        _consumer({"socket.timeout.ms": "soon"}, exactly_once=True)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_transaction_timeout_must_be_a_positive_finite_number(bad: float) -> None:
    with pytest.raises(ConfigurationError, match="transaction_timeout"):
        ConsumerOptions(exactly_once=True, transaction_timeout=bad)


def test_the_transactional_producer_gets_the_transaction_timeout() -> None:
    config = producer_config(build_kafka_config(UNREACHABLE), "id", 42.5)
    assert config["transaction.timeout.ms"] == 42_500


def test_replicas_sharing_a_client_id_get_distinct_transactional_ids() -> None:
    """Two live holders of one transactional.id fence each other; a shared client.id (usual
    for quotas) must not give replicas one."""
    config = build_kafka_config({**UNREACHABLE, "client.id": "svc"})
    options = ConsumerOptions(exactly_once=True)
    ids = set()
    for _ in range(2):
        store = _store_without_producer(config, options)
        ids.add(store._producer_config["transactional.id"])
    assert len(ids) == 2 and all(i.startswith("keyshared-g-svc-") for i in ids)
    explicit = ConsumerOptions(transactional_id="pod-1")
    assert _store_without_producer(config, explicit)._producer_config["transactional.id"] == (
        "pod-1"
    )


def _store_without_producer(config: dict[str, Any], options: ConsumerOptions) -> Any:
    from keyshared.kafka import transactions

    class NoProducer:
        def __init__(self, config: dict[str, Any]) -> None:
            pass

        def init_transactions(self, timeout: float) -> None:
            pass

    class Dispatcher:
        lock = None

    real = transactions.Producer
    transactions.Producer = NoProducer  # type: ignore[misc,assignment]
    try:
        metrics = type("M", (), {"producer_fenced": lambda self, n=1: None})()
        return transactional_store(None, config, options, metrics, Dispatcher())  # type: ignore[arg-type]
    finally:
        transactions.Producer = real  # type: ignore[misc]


def test_clients_built_from_the_config_log_through_python_logging(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """librdkafka's own lines (here: the refused connection) reach the ``keyshared.librdkafka``
    logger, not stderr as raw ``%3|...|`` lines."""
    config = build_kafka_config(UNREACHABLE)
    producer = Producer(producer_config(config, "log-check"))
    with caplog.at_level(logging.DEBUG, logger="keyshared.librdkafka"):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not caplog.records:
            producer.poll(0.2)
    producer.purge()
    del producer
    assert any(r.name == "keyshared.librdkafka" for r in caplog.records)
    assert "|rdkafka#" not in capfd.readouterr().err


def test_a_logger_of_the_users_own_wins() -> None:
    mine = logging.getLogger("mine")
    assert build_kafka_config({**UNREACHABLE, "logger": mine})["logger"] is mine
