"""Key and value deserializers: a plain ``bytes -> object`` callable, or confluent-kafka's own
``Deserializer`` objects (``AvroDeserializer``, ``JSONDeserializer``, ``ProtobufDeserializer``,
``StringDeserializer``...).

Why both: a team on Schema Registry already has its deserializers configured for a
``DeserializingConsumer``, and they need a ``SerializationContext`` to work: the topic and the
field name the subject (``orders-value``), and the headers may carry the schema id instead of
the payload's prefix. So a confluent ``Deserializer`` is called as confluent's own consumer
calls it, ``deserializer(data, SerializationContext(topic, field, headers))``, and plugs in
unchanged. A raise takes the poison path at once, without retries: the bytes will not change.

Example::

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    registry = SchemaRegistryClient({"url": "http://127.0.0.1:8081"})
    KeySharedConsumer(config, ["orders"], handle,
                      value_deserializer=AvroDeserializer(registry))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka.serialization import Deserializer, MessageField, SerializationContext

from keyshared.runtime.sinks import Decoder

__all__ = ["Decoder", "decoder"]


def decoder(deserializer: Callable[..., Any] | None, field: str) -> Decoder | None:
    """How the executor applies ``deserializer`` to the ``field`` ("key" or "value") of a
    message, or None when there is none (the raw bytes are handed over)."""
    if deserializer is None:
        return None
    if isinstance(deserializer, Deserializer):
        confluent = deserializer
        message_field = MessageField.KEY if field == "key" else MessageField.VALUE

        def with_context(data: bytes | None, msg: Any) -> Any:
            return confluent(data, SerializationContext(msg.topic(), message_field, msg.headers()))

        return with_context
    plain = deserializer
    return lambda data, _msg: plain(data)
