"""The part of a consumer config that any Kafka client (admin, producer) of ours can reuse."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["KEYED_PRODUCER", "client_properties"]

# Every producer of ours that lets the key pick the partition: murmur2, the Java client's
# default, so a key lands where a Java (Kafka Streams, Connect) producer of the same topic puts
# it. librdkafka's default (consistent_random, CRC32) sends the same key elsewhere, which
# splits the key over two partitions and breaks its order for every consumer of the topic.
KEYED_PRODUCER: dict[str, str] = {"partitioner": "murmur2_random"}

# Connection and identity: what a producer or admin client built beside the consumer needs to
# reach the same cluster the same way. Everything else is consumer-specific.
_CLIENT_PREFIXES = (
    "bootstrap.servers",
    "security.",
    "sasl.",
    "ssl.",
    "client.",
    "socket.",
    "broker.address.family",
    "metadata.",
    "topic.metadata",
    "debug",
    "log_level",
    "api.version",
    "reconnect.",
    "retry.backoff",
    "connections.max.idle",
)


# Callbacks every client type accepts; a client beside the consumer must authenticate (OAuth)
# and report errors and logs the same way. Consumer-only ones (on_commit...) are left out.
_CLIENT_CALLBACKS = ("oauth_cb", "error_cb", "throttle_cb", "logger")


def client_properties(config: Mapping[str, Any]) -> dict[str, Any]:
    """Connection, security and identity properties and shared callbacks; nothing consumer-only."""
    return {
        k: v
        for k, v in config.items()
        if (k.startswith(_CLIENT_PREFIXES) and not callable(v)) or k in _CLIENT_CALLBACKS
    }
