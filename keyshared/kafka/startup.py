"""Start-up of the Kafka consumer: build it, and check that the broker answers and the topics
exist, failing within a bound with an error that says what to check.

Apart from the consumer class because every failure here is about the user's setup (a bad
librdkafka property, a stopped broker, refused credentials, a missing topic), and each needs
an error naming it, not a hang or a bare ``KafkaException``.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaException

from keyshared.errors import ConfigurationError, UnreachableError
from keyshared.kafka.kafka_consumer import KafkaConsumer

__all__ = ["ClientErrors", "assigns_incrementally", "build_consumer", "check_reachable"]

_RETRY_TIMING = re.compile(r"\s*\(after \d+ms in state \w+\)")


class ClientErrors:
    """The client's recent errors (authentication, transport), quoted when start-up fails:
    "did not answer" alone cannot tell a stopped broker from refused credentials.

    :param user_callback: the user's own ``error_cb``, still called for every error.
    """

    def __init__(self, user_callback: Callable[[Any], None] | None) -> None:
        self._recent: collections.deque[str] = collections.deque(maxlen=3)
        self._user_callback = user_callback

    def __call__(self, err: Any) -> None:
        text = err.str() if hasattr(err, "str") else str(err)
        # "(after 301ms in state AUTH_REQ)" differs per retry; without it repeats collapse.
        self._recent.append(_RETRY_TIMING.sub("", text))
        if self._user_callback is not None:
            self._user_callback(err)

    def summary(self) -> str:
        return "; ".join(dict.fromkeys(self._recent)) or "no error reported"


def build_consumer(
    config: dict[str, Any], on_commit: Callable[..., None], errors: ClientErrors
) -> Any:
    """The confluent-kafka consumer, or a ConfigurationError naming the bad property.

    ``errors`` replaces the user's ``error_cb`` and calls it in turn.
    """
    try:
        return Consumer({**config, "on_commit": on_commit, "error_cb": errors})
    except (KafkaException, ValueError, TypeError) as exc:
        message = str(exc.args[0] if exc.args else exc)
        quoted = re.search(r'"([^"]+)"', message)
        prop = quoted.group(1) if quoted else "config"
        raise ConfigurationError(prop, message) from None


def check_reachable(
    consumer: KafkaConsumer,
    topics: Iterable[str],
    config: dict[str, Any],
    timeout: float,
    stop: threading.Event,
    errors: ClientErrors,
) -> bool:
    """Fail clearly and within ``timeout`` if the broker does not answer or a topic is missing.

    Asks in one-second slices so that a stop during start-up is honoured at once; returns
    False when stopped before the broker answered.
    """
    deadline = time.monotonic() + timeout
    while True:
        if stop.is_set():
            return False
        try:
            metadata = consumer.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            break
        except KafkaException as exc:
            consumer.poll(0)  # serves error_cb: why the broker did not answer
            if time.monotonic() >= deadline:
                raise UnreachableError(_unreachable(config, timeout, exc, errors)) from None
    missing = [t for t in topics if not t.startswith("^") and t not in metadata.topics]
    if missing:
        raise ConfigurationError(
            "topics", f"topic(s) not found on the broker: {', '.join(missing)}"
        )
    return True


def _unreachable(
    config: dict[str, Any], timeout: float, exc: KafkaException, errors: ClientErrors
) -> str:
    """Name the address, the bound, what librdkafka said, and what to check."""
    secured = str(config.get("security.protocol", "plaintext")).lower()
    return (
        f"Kafka at {config['bootstrap.servers']} did not answer within {timeout:g}s "
        f"({exc.args[0] if exc.args else exc}; client errors: {errors.summary()}); is the broker "
        f"running and reachable, and does security.protocol={secured} (with its sasl.* / "
        "ssl.* settings) match the listener?"
    )


def assigns_incrementally(config: dict[str, Any]) -> bool:
    """Whether the group assigns incrementally (cooperative-sticky or KIP-848), as librdkafka
    decides: rebalance callbacks must call ``incremental_assign`` then, else ``assign``."""
    if str(config.get("group.protocol", "classic")).lower() == "consumer":
        return True
    return "cooperative" in str(config.get("partition.assignment.strategy", ""))
