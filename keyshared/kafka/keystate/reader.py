"""The tail thread: reads the key-state topic from the beginning into an in-memory view.

Why every store reads the whole topic: it is small (one record per held key, compacted) and
the view answers ``load``/``get``/``snapshot`` without a round trip. Why a thread of its own: the
tail must keep reading while the consumer's threads do other work, since a release written by
another process (``keyshared release``) reaches the key's owner only through this thread.

Tombstones read before ``live_from`` (the topic's end when the store started) are history; from
there on a tombstone carrying the release header is reported through ``on_release``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from keyshared.kafka.keystate.records import (
    RELEASE_HEADER,
    KeyId,
    KeyState,
    decode_key,
    decode_state,
)

__all__ = ["KeyStateReader"]

log = logging.getLogger(__name__)


class KeyStateReader:
    """The latest state of every held key, kept current by a tail thread.

    Example::

        reader = KeyStateReader(topic, client, on_release=owner_release)
        reader.start(live_from=end_offset)
        reader.wait_for_position(end_offset, deadline=time.monotonic() + 30.0)
        reader.get(("orders", 0, b"k1"))                   # KeyState(state="parked", ...)
        reader.close(10.0)

    :param topic: the key-state topic.
    :param client: client-level properties (bootstrap servers, security).
    :param on_release: called on the tail thread with ``(topic, partition, key)`` for every
        release read at or after ``live_from``.
    """

    def __init__(
        self,
        topic: str,
        client: Mapping[str, Any],
        on_release: Callable[[str, int, bytes | None], None],
    ) -> None:
        self.topic = topic
        self._client = client
        self._on_release = on_release
        self._states: dict[KeyId, KeyState] = {}
        self._cond = threading.Condition()
        self._position = 0  # next offset of the topic the tail will read
        self._live_from: int | None = None  # tombstones from here on are releases to report
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._live_from is not None

    def start(self, live_from: int) -> None:
        """Start the tail thread; releases at offsets from ``live_from`` on are reported."""
        self._live_from = live_from
        self._thread = threading.Thread(target=self._tail, name="keyshared-keys-tail", daemon=True)
        self._thread.start()

    def close(self, timeout: float) -> None:
        """Stop the tail thread; wait up to ``timeout`` for it to close its consumer."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_for_position(self, end: int, deadline: float) -> int:
        """Wait until everything below offset ``end`` is read, ``deadline`` (monotonic) passed
        or the reader closed; return the offset reached (``>= end`` on success)."""
        with self._cond:
            while self._position < end:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed.is_set():
                    break
                self._cond.wait(remaining)
            return self._position

    def get(self, key_id: KeyId) -> KeyState | None:
        """The state of one key as read so far."""
        with self._cond:
            return self._states.get(key_id)

    def items(self) -> list[tuple[KeyId, KeyState]]:
        """Every held key and its state as read so far (a copy)."""
        with self._cond:
            return list(self._states.items())

    def _tail(self) -> None:
        consumer = Consumer({
            **self._client,
            "group.id": f"{self.topic}.tail",  # required by the client; never joined or committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
        })  # fmt: skip
        consumer.assign([KafkaTopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        try:
            while not self._closed.is_set():
                msg: Any = consumer.poll(0.2)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        self._advance(msg.offset())
                    else:
                        log.warning("reading key states from %r: %s", self.topic, err)
                    continue
                self._apply(msg)
        finally:
            consumer.close()

    def _apply(self, msg: Any) -> None:
        try:
            key_id = decode_key(msg.key())
            state = decode_state(msg.value())
        except (TypeError, ValueError):  # json.JSONDecodeError is a ValueError
            log.warning("ignoring a malformed record at %s@%d", self.topic, msg.offset())
            self._advance(msg.offset() + 1)
            return
        with self._cond:
            if state is None:
                self._states.pop(key_id, None)
            else:
                self._states[key_id] = state
        released = (
            state is None
            and self._live_from is not None
            and msg.offset() >= self._live_from
            and RELEASE_HEADER in (msg.headers() or ())
        )
        if released:
            try:
                self._on_release(*key_id)
            except Exception:
                log.exception("handling the release of %r failed", key_id)
        self._advance(msg.offset() + 1)

    def _advance(self, position: int) -> None:
        with self._cond:
            self._position = max(self._position, position)
            self._cond.notify_all()
