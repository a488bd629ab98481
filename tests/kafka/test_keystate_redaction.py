"""The key-state store's log lines show keys through the redaction hook, like every other log
line (issue 14: a blocked key's failed write logged the raw key)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError

from keyshared.kafka.keystate import KeyStateStore

SECRET = b"alice@example.com"


def failing_store(redact: Any) -> KeyStateStore:
    """A store whose every write fails at once (no broker is asked)."""
    store = KeyStateStore(
        {"bootstrap.servers": "127.0.0.1:9", "log_level": 0},
        "g",
        lambda *_: None,
        lambda _delay, _fn: None,
        redact=redact,
    )

    def produce(_key: bytes, _value: bytes | None, report: Any, headers: Any = None) -> None:
        report(KafkaError(KafkaError._FAIL, "refused"), None)

    store._produce = produce  # type: ignore[method-assign]
    return store


@pytest.mark.parametrize("write", ["blocked", "parked"])
def test_failed_key_state_writes_log_the_redacted_key(
    write: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = failing_store(lambda text: "<key>")
    try:
        with caplog.at_level(logging.WARNING, logger="keyshared"):
            if write == "blocked":
                store.record_blocked("t", 0, SECRET, 5, "boom")
            else:
                store.park("t", 0, SECRET, 5, still_wanted=lambda: True, on_durable=lambda: None)
    finally:
        store.close(timeout=1)
    text = caplog.text
    assert "<key>" in text, text
    assert "alice" not in text, f"the raw key reached the log: {text}"
