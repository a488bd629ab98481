"""Parked and blocked keys of a consumer group, kept durably in a compacted Kafka topic.

Why Kafka and not memory: a parked key must stay parked across restarts and partition moves, or
its later records would be processed while an earlier one sits in the DLQ, and a replay of the
DLQ could no longer restore the key's order. Why a compacted topic: the state is "the latest
value per key", which is exactly what compaction keeps, it needs no extra system, and every
member of the group (and the ``keyshared release`` command) can read and write it.

The topic is ``keyshared.keys.<group>`` (one partition, ``cleanup.policy=compact``), created on
first use. Every store tails the whole topic into memory; a tombstone written while it runs is a
release, reported through ``on_release`` — how an operator's release in another process reaches
the consumer that owns the key.

One job per module:

    records.py   the record format: topic name, record key and value encoding, release header
    topic.py     the topic itself: created on first use, its end offset (the read barrier)
    reader.py    the tail thread and the in-memory view it keeps; reports releases
    store.py     KeyStateStore: park, block and release keys; load, get and list them
    errors.py    KeyStateError
"""

from __future__ import annotations

from keyshared.kafka.keystate.errors import KeyStateError
from keyshared.kafka.keystate.records import KeyState, decode_key, encode_key, topic_for
from keyshared.kafka.keystate.store import KeyStateStore

__all__ = ["KeyState", "KeyStateError", "KeyStateStore", "decode_key", "encode_key", "topic_for"]
