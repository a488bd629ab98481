"""``KeyStateStore``: park, block and release a group's keys, and read them back.

Writes go through an idempotent producer to the key-state topic (see records.py for the
format); reads come from the tail's in-memory view (reader.py), made current on demand by
waiting for the topic's end offset (topic.py). A park is only complete once the broker
acknowledged it, because the record that caused it is settled from that acknowledgement.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from keyshared.core.redaction import Redactor, shown_key
from keyshared.kafka.client_config import client_properties
from keyshared.kafka.dlq import MESSAGE_TIMEOUT_S, retry_delay
from keyshared.kafka.keystate.errors import KeyStateError
from keyshared.kafka.keystate.reader import KeyStateReader
from keyshared.kafka.keystate.records import (
    RELEASE_HEADER,
    KeyId,
    KeyState,
    encode_key,
    encode_state,
    topic_for,
)
from keyshared.kafka.keystate.topic import TopicEnd, ensure_topic

__all__ = ["KeyStateStore"]

log = logging.getLogger(__name__)

_ADMIN_TIMEOUT_S = 30.0


class KeyStateStore:
    """One group's parked/blocked keys: written through Kafka, read back by a tail thread.

    Example::

        store = KeyStateStore(config, "orders", on_release=consumer_release,
                              call_later=scheduler.call_later)
        store.start()
        parked = store.load([("orders", 0)], timeout=30.0)   # {("orders", 0): {b"k1"}}
        store.park("orders", 0, b"k2", 42, still_wanted=owned, on_durable=mark_done)
        store.release("orders", 0, b"k2")                    # on_release fires everywhere
        store.close()

    :param kafka_config: the consumer's config; only client-level properties are inherited.
    :param group: the consumer group whose keys these are.
    :param on_release: called on the tail thread with ``(topic, partition, key)`` for every
        release written while this store runs (by any process).
    :param call_later: runs a callback after a delay; schedules retries of failed parks.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        group: str,
        on_release: Callable[[str, int, bytes | None], None],
        call_later: Callable[[float, Callable[[], None]], None],
        *,
        initial_backoff: float = 0.5,
        max_backoff: float = 10.0,
        redact: Redactor | None = None,
    ) -> None:
        self.topic = topic_for(group)
        self._redact = redact  # keys in log lines go through the user's hook, like everywhere
        self._client = client_properties(kafka_config)
        self._group = group
        self._call_later = call_later
        self._backoff = (initial_backoff, max_backoff)
        self._producer = Producer({
            **self._client,
            "enable.idempotence": True,
            "acks": "all",
            "message.timeout.ms": int(MESSAGE_TIMEOUT_S * 1000),
            "allow.auto.create.topics": False,
        })  # fmt: skip
        self._admin = AdminClient(self._client)
        self._end = TopicEnd(self.topic, self._client)
        self._reader = KeyStateReader(self.topic, self._client, on_release)
        self._closed = threading.Event()
        self._parks: dict[object, Callable[[], None]] = {}  # pending parks: their abandonment
        self._parks_lock = threading.Lock()
        self._serve_thread = threading.Thread(target=self._serve, name="keyshared-keys-producer",
                                              daemon=True)  # fmt: skip
        self._serve_thread.start()

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = _ADMIN_TIMEOUT_S, *, create: bool = True) -> None:
        """Create the topic if needed and start tailing it from the beginning.

        :param create: False for tools that must not invent a group (a typo would otherwise
            leave a stray topic behind); a missing topic is then a :class:`KeyStateError`.
        """
        ensure_topic(self._admin, self.topic, self._group, timeout, create)
        self._reader.start(live_from=self._end.offset(timeout))

    def close(self, timeout: float = 10.0) -> None:
        """Wait up to ``timeout`` for outstanding writes, then stop both threads. Idempotent."""
        if self._closed.is_set():
            return
        unsent = self._producer.flush(timeout)
        self._closed.set()
        with self._parks_lock:
            pending = list(self._parks.values())
        for abandon in pending:
            abandon()  # not durable: the next owner parks the key again if it must
        self._reader.close(timeout)
        self._serve_thread.join(timeout)
        if unsent == 0 and not self._serve_thread.is_alive():
            self._producer.close()  # disconnect now, not at garbage collection
        self._end.close()

    # -- reads ---------------------------------------------------------------------------------

    def sync(self, timeout: float) -> None:
        """Return once the in-memory view includes every write acknowledged before the call.

        :raises KeyStateError: the tail did not get there within ``timeout`` seconds.
        """
        if not self._reader.started:
            raise KeyStateError("KeyStateStore.start() must be called before reading")
        deadline = time.monotonic() + timeout
        end = self._end.offset(timeout)
        reached = self._reader.wait_for_position(end, deadline)
        if reached < end:
            raise KeyStateError(
                f"reading {self.topic!r} reached offset {reached} of {end} within {timeout:.0f}s"
            )

    def load(
        self,
        partitions: list[tuple[str, int]],
        timeout: float,
        owns: Callable[[tuple[str, int], bytes | None, int], bool] | None = None,
    ) -> dict[tuple[str, int], set[bytes | None]]:
        """The parked keys of ``partitions``, as of now (see :meth:`sync`); for their new owner.

        Blocked entries of these partitions are cleared on the way: a block lives in the memory
        of the member that hit it, so after a move the record is redelivered, tried again and,
        if it fails again, recorded again. The clean-up is not a release (no ``on_release``).
        ``owns(partition, key, offset)`` limits it to the blocked records this member will run
        itself: in ``key_shared`` mode every member reads every partition, and a block of a key
        another member holds is that member's (default: every record is this member's).
        """
        self.sync(timeout)
        wanted = set(partitions)
        parked: dict[tuple[str, int], set[bytes | None]] = {tp: set() for tp in partitions}
        stale: list[KeyId] = []
        for key_id, state in self._reader.items():
            tp = (key_id[0], key_id[1])
            if tp in wanted:
                if state.state == "parked":
                    parked[tp].add(key_id[2])
                elif owns is None or owns(tp, key_id[2], state.offset):
                    stale.append(key_id)
        for key_id in stale:
            self._produce(encode_key(*key_id), None, lambda err, _msg: None)
        return parked

    def get(self, topic: str, partition: int, key: bytes | None) -> KeyState | None:
        """The state of one key in the in-memory view (call :meth:`sync` first for "now")."""
        return self._reader.get((topic, partition, key))

    def snapshot(self) -> list[dict[str, object]]:
        """Every parked or blocked key, for ``keyshared status``; keys as text or hex."""
        items = sorted(self._reader.items(), key=lambda item: _sort_key(item[0]))
        rows: list[dict[str, object]] = []
        for (topic, partition, key), state in items:
            text, encoding = _render(key)
            rows.append({"topic": topic, "partition": partition, "key": text,
                         "key_encoding": encoding, **asdict(state)})  # fmt: skip
        return rows

    # -- writes --------------------------------------------------------------------------------

    def park(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        offset: int,
        *,
        still_wanted: Callable[[], bool],
        on_durable: Callable[[], None],
        on_abandoned: Callable[[], None] | None = None,
    ) -> None:
        """Record ``key`` as parked; ``on_durable`` runs once the broker acknowledged it.

        A failed write is logged and retried with a capped backoff while ``still_wanted()``;
        when the partition has moved on, its next owner parks the key again if it must, and
        ``on_abandoned`` runs once instead (also for a park still pending at :meth:`close`):
        the record must stop counting as running here, or its partition's lease waits for it.
        """
        record_key = encode_key(topic, partition, key)
        value = encode_state(KeyState("parked", offset, time.time()))
        where = f"key {shown_key(key, self._redact)} of {topic}[{partition}] (offset {offset})"
        token = object()

        def settle(outcome: Callable[[], None] | None, what: str) -> None:
            with self._parks_lock:
                if self._parks.pop(token, None) is None:
                    return  # settled already (close() abandoned it)
            if outcome is not None:
                try:
                    outcome()
                except Exception:
                    log.exception("%s the park of %s failed", what, where)

        with self._parks_lock:
            self._parks[token] = lambda: settle(on_abandoned, "abandoning")

        def attempt(failures: int) -> None:
            if not self._closed.is_set() and still_wanted():
                self._produce(record_key, value, lambda err, _msg: report(err, failures))
            else:
                settle(on_abandoned, "abandoning")

        def report(err: KafkaError | None, failures: int) -> None:
            if err is None:
                settle(on_durable, "completing")
                return
            delay = retry_delay(failures + 1, *self._backoff)
            log.error("parking %s in %r failed, retrying in %.1fs: %s",
                      where, self.topic, delay, err)  # fmt: skip
            self._call_later(delay, lambda: attempt(failures + 1))

        attempt(0)

    def record_blocked(
        self, topic: str, partition: int, key: bytes | None, offset: int, error: str
    ) -> None:
        """Record ``key`` as blocked, for status and release; best effort, not waited for."""
        value = encode_state(KeyState("blocked", offset, time.time(), error[:1000]))

        def report(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                log.warning("could not record blocked key %s of %s[%d] in %r: %s",
                            shown_key(key, self._redact), topic, partition, self.topic,
                            err)  # fmt: skip

        self._produce(encode_key(topic, partition, key), value, report)

    def release(
        self, topic: str, partition: int, key: bytes | None, timeout: float = MESSAGE_TIMEOUT_S
    ) -> None:
        """Release ``key``: write its tombstone and wait until the broker acknowledged it.

        :raises KeyStateError: the write failed or was not acknowledged within ``timeout``.
        """
        done = threading.Event()
        failure: list[KafkaError] = []

        def report(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failure.append(err)
            done.set()

        self._produce(encode_key(topic, partition, key), None, report, headers=[RELEASE_HEADER])
        if not done.wait(timeout) or failure:
            why = failure[0] if failure else f"no acknowledgement within {timeout:.0f}s"
            raise KeyStateError(f"releasing key {key!r} of {topic}[{partition}] failed: {why}")

    # -- internals -----------------------------------------------------------------------------

    def _produce(
        self,
        record_key: bytes,
        value: bytes | None,
        report: Callable[[KafkaError | None, Any], None],
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        try:
            self._producer.produce(self.topic, key=record_key, value=value, headers=headers,
                                   partition=0, on_delivery=report)  # fmt: skip
        except (BufferError, KafkaException) as exc:
            report(KafkaError(KafkaError._FAIL, f"could not queue the write: {exc}"), None)

    def _serve(self) -> None:
        """Serve delivery reports of the producer until the store closes."""
        while not self._closed.is_set():
            self._producer.poll(0.1)


def _render(key: bytes | None) -> tuple[str | None, str]:
    if key is None:
        return None, "null"
    try:
        return key.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return key.hex(), "hex"


def _sort_key(key_id: KeyId) -> tuple[str, int, bool, bytes]:
    topic, partition, key = key_id
    return (topic, partition, key is not None, key or b"")
