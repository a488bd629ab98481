"""keyshared: process Kafka messages in parallel per key, keeping per-key order.

The public names live here; everything else is an implementation module. The consumer is
imported lazily so that light commands (``keyshared dev``) do not load the Kafka client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from keyshared.core.poison import DeserializationError, DoNotRetry, PoisonPolicy, RetryPolicy
from keyshared.errors import (
    BatchError,
    ConfigurationError,
    KeySharedError,
    OutputError,
    UnreachableError,
)
from keyshared.record import Record
from keyshared.settings import ConsumerOptions

if TYPE_CHECKING:
    from keyshared.consumer.key_shared_consumer import KeySharedConsumer

__all__ = [
    "BatchError",
    "ConfigurationError",
    "ConsumerOptions",
    "DeserializationError",
    "DoNotRetry",
    "KeySharedConsumer",
    "KeySharedError",
    "OutputError",
    "PoisonPolicy",
    "Record",
    "RetryPolicy",
    "UnreachableError",
]


def __getattr__(name: str) -> Any:
    if name == "KeySharedConsumer":
        from keyshared.consumer.key_shared_consumer import KeySharedConsumer

        return KeySharedConsumer
    raise AttributeError(f"module 'keyshared' has no attribute {name!r}")
