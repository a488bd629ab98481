"""Which keys are still parked, and releasing them: the key-state topic, seen from a replay.

Why a replay checks: while a key is parked, the live consumer dead-letters every record of it,
so a replayed record would go straight back to the DLQ. The key must be released first
(``keyshared release``, or ``--release`` which releases exactly the keys being replayed).
The key-state topic is small (one record per held key), so it is read on the driver.

A replay also needs the dead letters to be *settled*: the group must have committed past them
(see :func:`unsettled_partitions`), or the consumer would deliver them once more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from keyshared.kafka.keystate import KeyStateError, KeyStateStore
from keyshared.spark.errors import SparkJobError
from keyshared.spark.plan import ParkedKey

__all__ = ["parked_keys", "release_keys", "unsettled_partitions"]


def _call_later(delay: float, fn: Callable[[], None]) -> None:
    timer = threading.Timer(delay, fn)
    timer.daemon = True
    timer.start()


def _store(bootstrap: str, group: str, client: Mapping[str, Any]) -> KeyStateStore:
    config = {**client, "bootstrap.servers": bootstrap}
    return KeyStateStore(config, group, lambda *_: None, _call_later)


def parked_keys(
    bootstrap: str,
    groups: Iterable[str],
    client: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
) -> list[ParkedKey]:
    """Every key parked by any of ``groups`` right now (a group that never parked a key has
    no key-state topic and contributes nothing).

    :raises SparkJobError: a key-state topic exists but cannot be read within ``timeout``.
    """
    found: list[ParkedKey] = []
    for group in sorted(set(groups)):
        store = _store(bootstrap, group, client or {})
        try:
            try:
                store.start(timeout, create=False)
            except KeyStateError as exc:
                if "does not exist" in str(exc):
                    continue
                raise
            store.sync(timeout)
            for row in store.snapshot():
                if row["state"] != "parked":
                    continue
                text, encoding = row["key"], row["key_encoding"]
                key = (None if encoding == "null" else bytes.fromhex(str(text))
                       if encoding == "hex" else str(text).encode())  # fmt: skip
                found.append(ParkedKey(group, str(row["topic"]), int(str(row["partition"])), key))
        except KeyStateError as exc:
            raise SparkJobError(f"cannot read the parked keys of group {group!r}: {exc}") from exc
        finally:
            store.close(timeout)
    return found


def release_keys(
    bootstrap: str,
    keys: Iterable[ParkedKey],
    client: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
) -> int:
    """Release ``keys`` (as ``keyshared release`` does); returns how many were released.

    :raises SparkJobError: a release was not acknowledged within ``timeout``.
    """
    by_group: dict[str, list[ParkedKey]] = {}
    for key in keys:
        by_group.setdefault(key.group, []).append(key)
    released = 0
    for group, held in sorted(by_group.items()):
        store = _store(bootstrap, group, client or {})
        try:
            store.start(timeout, create=False)
            for key in held:
                store.release(key.topic, key.partition, key.key, timeout)
                released += 1
        except KeyStateError as exc:
            raise SparkJobError(f"releasing keys of group {group!r} failed: {exc}") from exc
        finally:
            store.close(timeout)
    return released


def unsettled_partitions(
    bootstrap: str,
    last_offsets: Iterable[tuple[str, str, int, int]],
    client: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
) -> list[str]:
    """Source partitions whose group has not committed past the dead letters to replay.

    A dead letter above its group's committed offset is not settled yet (its DLQ write may
    still be in flight, or the member stopped before committing): the record will be delivered
    again, so replaying it now would handle it twice and, with the key released, let the
    key's later records overtake the replayed ones. A partition the group never committed on
    (a DLQ written by ``keyshared reprocess``) is not checked.

    :param last_offsets: ``(group, topic, partition, highest source offset to replay)``.
    :returns: one line per unsettled partition, for the error message.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    by_group: dict[str, list[tuple[str, int, int]]] = {}
    for group, topic, partition, offset in last_offsets:
        by_group.setdefault(group, []).append((topic, partition, offset))
    lines: list[str] = []
    for group, wanted in sorted(by_group.items()):
        consumer = Consumer({**(client or {}), "bootstrap.servers": bootstrap, "group.id": group,
                             "enable.auto.commit": False})  # fmt: skip
        try:
            found = consumer.committed([TopicPartition(t, p) for t, p, _ in wanted], timeout)
        except KafkaException as exc:
            raise SparkJobError(f"reading the offsets of group {group!r} failed: {exc}") from exc
        finally:
            consumer.close()
        for (topic, partition, offset), tp in zip(wanted, found, strict=True):
            if 0 <= tp.offset <= offset:
                lines.append(f"{topic}[{partition}]: group {group!r} committed {tp.offset}, "
                             f"a dead letter to replay is at offset {offset}")  # fmt: skip
    return lines
