"""Where the key-state topic ends (``keyshared/kafka/keystate/topic.py``), without a broker.

Finding 26 (docs/chaos.md): after a rolling restart of every broker, a standby that won the
exclusive lock read the key-state topic's end through a client created before the restart. It
answered "Local: Unknown partition" for the whole 30 s timeout, while members created after the
restart read it at once; the group processed nothing meanwhile. A client that keeps answering
"not yet" is now replaced by a new one.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from keyshared.kafka.keystate import topic as topic_module
from keyshared.kafka.keystate.errors import KeyStateError
from keyshared.kafka.keystate.topic import FRESH_CLIENT_AFTER_S, TopicEnd


class _Client:
    """A consumer whose watermark queries fail with ``error`` (None: answer 42)."""

    made: list[_Client] = []
    errors: list[int | None] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.error = _Client.errors[len(_Client.made)]
        self.closed = False
        _Client.made.append(self)

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        if self.error is not None:
            raise KafkaException(KafkaError(self.error))
        return 0, 42

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> type[_Client]:
    _Client.made, _Client.errors = [], []
    monkeypatch.setattr(topic_module, "Consumer", _Client)
    return _Client


def test_a_client_that_keeps_answering_not_yet_is_replaced(clients: type[_Client]) -> None:
    clients.errors = [KafkaError._UNKNOWN_PARTITION, None]
    end = TopicEnd("keys", {"bootstrap.servers": "127.0.0.1:9"})
    assert end.offset(timeout=FRESH_CLIENT_AFTER_S * 3) == 42
    assert len(clients.made) == 2 and clients.made[0].closed


def test_an_error_that_is_not_transient_is_raised_at_once(clients: type[_Client]) -> None:
    clients.errors = [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    end = TopicEnd("keys", {"bootstrap.servers": "127.0.0.1:9"})
    with pytest.raises(KeyStateError, match="cannot read the end of 'keys'"):
        end.offset(timeout=FRESH_CLIENT_AFTER_S * 3)
    assert len(clients.made) == 1
