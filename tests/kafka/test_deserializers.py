"""How a key or value deserializer is called: confluent-kafka's ``Deserializer`` objects with
their ``SerializationContext``, plain callables with the bytes alone (no broker here)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.serialization import (
    Deserializer,
    MessageField,
    SerializationContext,
    StringDeserializer,
)

import keyshared
from keyshared.kafka.deserializers import decoder

HEADERS = [("__value_schema_id", b"\x01"), ("trace", b"t")]


class Message:
    """The two things a deserializer's context is built from."""

    def topic(self) -> str:
        return "orders"

    def headers(self) -> list[tuple[str, bytes]]:
        return HEADERS


class Recording(Deserializer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.contexts: list[SerializationContext | None] = []

    def __call__(self, value: bytes | None, ctx: SerializationContext | None = None) -> Any:
        self.contexts.append(ctx)
        return value


@pytest.mark.parametrize(("field", "expected"), [("key", MessageField.KEY),
                                                 ("value", MessageField.VALUE)])  # fmt: skip
def test_a_confluent_deserializer_gets_topic_field_and_headers(field: str, expected: str) -> None:
    recording = Recording()
    decode = decoder(recording, field)
    assert decode is not None
    assert decode(b"data", Message()) == b"data"
    [ctx] = recording.contexts
    assert ctx is not None
    assert (ctx.topic, ctx.field, ctx.headers) == ("orders", expected, HEADERS)


def test_confluents_string_deserializer_plugs_in() -> None:
    decode = decoder(StringDeserializer("utf_8"), "key")
    assert decode is not None and decode("é".encode(), Message()) == "é"


def test_a_plain_callable_gets_the_bytes_alone() -> None:
    decode = decoder(bytes.upper, "value")
    assert decode is not None and decode(b"abc", Message()) == b"ABC"
    assert decoder(None, "value") is None


CONFIG = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g"}


class AsyncDeserializer(Deserializer):  # type: ignore[misc]
    async def __call__(self, value: bytes | None, ctx: Any = None) -> Any:
        return value


async def async_function(value: bytes | None) -> Any:
    return value


@pytest.mark.parametrize("option", ["key_deserializer", "value_deserializer"])
@pytest.mark.parametrize("bad", ["not callable", AsyncDeserializer(), async_function])
def test_a_deserializer_that_cannot_work_fails_at_construction(option: str, bad: Any) -> None:
    with pytest.raises(keyshared.ConfigurationError, match=option):
        keyshared.KeySharedConsumer(CONFIG, ["t"], print, **{option: bad})
