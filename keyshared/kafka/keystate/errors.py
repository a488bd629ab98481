"""The one error of the key-state store, so callers can tell it from a handler's or Kafka's.

``keyshared release`` and ``keyshared status`` print it as a one-line reason; the consumer
treats it as "the key state is unavailable" (the topic missing, unreachable or not caught up).
"""

from __future__ import annotations

from keyshared.errors import KeySharedError

__all__ = ["KeyStateError"]


class KeyStateError(KeySharedError):
    """The key-state topic could not be created, read or written in time."""
