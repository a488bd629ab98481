"""The key-state topic's record format: its name, record keys, record values, release header.

Kept apart from any client so the format is one readable page, tested without a broker, and
shared by the writer (the store), the reader (the tail thread) and tools that only need names.

The record key is JSON ``[topic, partition, key]`` with the key base64-encoded (or ``null`` for
the null key, so it stays distinct from the empty key); the value is JSON ``{"state":
"parked"|"blocked", "offset", "since", "error"}``, or a tombstone once the key is released. A
tombstone that is a release (not a clean-up) carries the ``keyshared.release`` header.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass

from keyshared.kafka.keystate.topic import group_topic

__all__ = [
    "RELEASE_HEADER",
    "KeyId",
    "KeyState",
    "decode_key",
    "decode_state",
    "encode_key",
    "encode_state",
    "topic_for",
]

KeyId = tuple[str, int, bytes | None]  # source topic, partition, raw key
# On tombstones that are releases, not clean-ups: only releases are reported to `on_release`.
RELEASE_HEADER: tuple[str, str | bytes | None] = ("keyshared.release", b"operator")


@dataclass(frozen=True)
class KeyState:
    """Why a key is held: ``parked`` (its records go to the DLQ) or ``blocked`` (they wait)."""

    state: str
    offset: int
    since: float  # epoch seconds
    error: str = ""


def topic_for(group: str) -> str:
    """The key-state topic of ``group``."""
    return group_topic("keyshared.keys", group)


def encode_key(topic: str, partition: int, key: bytes | None) -> bytes:
    """The compacted record key of a source key (deterministic, binary-safe)."""
    raw = None if key is None else base64.b64encode(key).decode()
    return json.dumps([topic, partition, raw], separators=(",", ":")).encode()


def decode_key(data: bytes) -> KeyId:
    """The source key of a compacted record key (see :func:`encode_key`).

    :raises ValueError, TypeError: ``data`` is not a record key of this format.
    """
    topic, partition, raw = json.loads(data)
    return str(topic), int(partition), None if raw is None else base64.b64decode(raw)


def encode_state(state: KeyState) -> bytes:
    """The record value of a held key."""
    return json.dumps(asdict(state), separators=(",", ":")).encode()


def decode_state(value: bytes | None) -> KeyState | None:
    """The state a record value holds; None for a tombstone (the key is no longer held).

    :raises ValueError, TypeError: ``value`` is not a record value of this format.
    """
    return None if value is None else KeyState(**json.loads(value))
