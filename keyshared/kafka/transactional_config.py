"""The transactional producer's settings: built from the consumer's, checked at construction.

An exactly-once consumer runs a transactional producer beside it
(:mod:`keyshared.kafka.transactions`) that shares its connection and identity. librdkafka checks
that producer's properties only when it is built, at ``run()``; :func:`check_producer_config`
builds one at construction instead, so a refused property is named before anything runs.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from keyshared.errors import ConfigurationError
from keyshared.kafka.client_config import KEYED_PRODUCER, client_properties
from keyshared.settings import ConsumerOptions

__all__ = ["check_producer_config", "default_transactional_id", "producer_config"]


def producer_config(
    kafka_config: dict[str, Any], transactional_id: str, transaction_timeout: float = 10.0
) -> dict[str, Any]:
    """The transactional producer beside a consumer: the consumer's connection and identity."""
    return {
        **client_properties(kafka_config),
        "transactional.id": transactional_id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        # An open transaction of a killed member blocks read_committed readers (and the next
        # owner's committed-offset read) until it times out; keep that short (10 s default).
        "transaction.timeout.ms": round(transaction_timeout * 1000),
        **KEYED_PRODUCER,
    }


def check_producer_config(kafka_config: dict[str, Any], options: ConsumerOptions) -> None:
    """Refuse at construction what librdkafka would refuse only when ``run()`` builds the
    transactional producer, naming the property; and own ``isolation.level``.

    The producer inherits the consumer's ``socket.*`` properties, and librdkafka refuses a
    transactional producer whose ``socket.timeout.ms`` exceeds ``transaction.timeout.ms`` +
    100. The consumer must read committed: a ``read_uncommitted`` one would process records of
    aborted upstream transactions and read committed offsets without waiting for a pending
    transactional commit (KIP-447), which the redo after a failed transaction relies on.
    """
    if not options.exactly_once:
        return
    level = str(kafka_config.get("isolation.level", "read_committed")).lower()
    if level != "read_committed":
        raise ConfigurationError(
            "isolation.level",
            f"exactly_once needs read_committed (keyshared sets it), got {level!r}: a "
            "read_uncommitted consumer would process aborted input and could redo records "
            "whose outputs a pending transaction commits",
        )
    kafka_config["isolation.level"] = "read_committed"
    timeout_ms = round(options.transaction_timeout * 1000)
    socket_ms = kafka_config.get("socket.timeout.ms")
    if str(socket_ms).isdigit() and int(str(socket_ms)) > timeout_ms + 100:
        raise ConfigurationError(
            "socket.timeout.ms",
            f"{socket_ms} ms exceeds transaction_timeout ({timeout_ms} ms) + 100 ms, which "
            "librdkafka refuses for the transactional producer (it inherits socket.*); lower "
            "it or raise transaction_timeout",
        )
    config = producer_config(kafka_config, "keyshared-config-check", options.transaction_timeout)
    try:
        Producer(config)  # librdkafka checks its properties here, without any request
    except (KafkaException, ValueError, TypeError) as exc:
        err = exc.args[0] if exc.args else exc
        message = err.str() if isinstance(err, KafkaError) else str(err)
        quoted = re.search(r'"([^"]+)"', message)
        raise ConfigurationError(
            quoted.group(1) if quoted else "config",
            f"the exactly-once transactional producer refuses it: {message}",
        ) from None


def default_transactional_id(group: str, member: str) -> str:
    """Unique per run: replicas sharing a ``client.id`` (usual for quotas) never share an id,
    so they cannot fence each other. KIP-447 needs no stable id (the group generation fences
    zombies); a stable one only lets a restart abort its predecessor's open transaction at
    once, which is what an explicit per-replica ``transactional_id`` is for."""
    return f"keyshared-{group}-{member}-{uuid.uuid4().hex[:12]}"
