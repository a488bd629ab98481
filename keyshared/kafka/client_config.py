"""The part of a consumer config that any Kafka client (admin, producer) of ours can reuse."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["client_properties"]

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


def client_properties(config: Mapping[str, Any]) -> dict[str, Any]:
    """Connection, security and identity properties; no callbacks, no consumer settings."""
    return {k: v for k, v in config.items() if k.startswith(_CLIENT_PREFIXES) and not callable(v)}
