"""Parked and blocked keys of a consumer group, kept durably in a compacted Kafka topic.

Why Kafka and not memory: a parked key must stay parked across restarts and partition moves, or
its later records would be processed while an earlier one sits in the DLQ, and a replay of the
DLQ could no longer restore the key's order. Why a compacted topic: the state is "the latest
value per key", which is exactly what compaction keeps, it needs no extra system, and every
member of the group (and the ``keyshared release`` command) can read and write it.

The topic is ``keyshared.keys.<group>`` (one partition, ``cleanup.policy=compact``), created on
first use. Its record key is JSON ``[topic, partition, key]`` with the key base64-encoded (or
``null`` for the null key, so it stays distinct from the empty key); its value is JSON
``{"state": "parked"|"blocked", "offset", "since", "error"}``, or a tombstone once the key is
released. Every store tails the whole topic into memory; a tombstone written while it runs is a
release, reported through ``on_release`` — how an operator's release in another process reaches
the consumer that owns the key.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from keyshared.errors import KeySharedError
from keyshared.kafka.client_config import client_properties
from keyshared.kafka.dlq import MESSAGE_TIMEOUT_S, retry_delay

__all__ = ["KeyState", "KeyStateError", "KeyStateStore", "decode_key", "encode_key", "topic_for"]

log = logging.getLogger(__name__)

KeyId = tuple[str, int, bytes | None]  # source topic, partition, raw key
_RELEASE: tuple[str, str | bytes | None] = (
    "keyshared.release",
    b"operator",
)  # on tombstones that are releases, not clean-ups
_ADMIN_TIMEOUT_S = 30.0
# What a topic answers in the moments after its creation, before its leader is known everywhere.
_NOT_READY_YET = frozenset({
    KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
})  # fmt: skip


class KeyStateError(KeySharedError):
    """The key-state topic could not be created, read or written in time."""


@dataclass(frozen=True)
class KeyState:
    """Why a key is held: ``parked`` (its records go to the DLQ) or ``blocked`` (they wait)."""

    state: str
    offset: int
    since: float  # epoch seconds
    error: str = ""


def topic_for(group: str) -> str:
    """The key-state topic of ``group``; characters a topic name cannot hold are replaced and
    a checksum keeps two such groups apart."""
    safe = re.sub(r"[^a-zA-Z0-9._-]", "_", group)
    if safe != group:
        safe = f"{safe[:200]}-{zlib.crc32(group.encode()):08x}"
    return f"keyshared.keys.{safe}"


def encode_key(topic: str, partition: int, key: bytes | None) -> bytes:
    """The compacted record key of a source key (deterministic, binary-safe)."""
    raw = None if key is None else base64.b64encode(key).decode()
    return json.dumps([topic, partition, raw], separators=(",", ":")).encode()


def decode_key(data: bytes) -> KeyId:
    topic, partition, raw = json.loads(data)
    return str(topic), int(partition), None if raw is None else base64.b64decode(raw)


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
    ) -> None:
        self.topic = topic_for(group)
        self._client = client_properties(kafka_config)
        self._group = group
        self._on_release = on_release
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
        # Answers "where does the topic end?" for the load barrier; never reads records.
        self._watermarks_lock = threading.Lock()
        self._watermarks = Consumer({**self._client, "group.id": f"{self.topic}.tail"})
        self._states: dict[KeyId, KeyState] = {}
        self._cond = threading.Condition()
        self._position = 0  # next offset of the topic the tail will read
        self._live_from: int | None = None  # tombstones from here on are releases to report
        self._closed = threading.Event()
        self._threads = [threading.Thread(target=self._serve, name="keyshared-keys-producer",
                                          daemon=True)]  # fmt: skip
        self._threads[0].start()

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = _ADMIN_TIMEOUT_S, *, create: bool = True) -> None:
        """Create the topic if needed and start tailing it from the beginning.

        :param create: False for tools that must not invent a group (a typo would otherwise
            leave a stray topic behind); a missing topic is then a :class:`KeyStateError`.
        """
        self._ensure_topic(timeout, create)
        self._live_from = self._end_offset(timeout)
        tail = threading.Thread(target=self._tail, name="keyshared-keys-tail", daemon=True)
        self._threads.append(tail)
        tail.start()

    def close(self, timeout: float = 10.0) -> None:
        """Wait up to ``timeout`` for outstanding writes, then stop both threads."""
        self._producer.flush(timeout)
        self._closed.set()
        for thread in self._threads:
            thread.join(timeout)
        self._watermarks.close()

    # -- reads ---------------------------------------------------------------------------------

    def sync(self, timeout: float) -> None:
        """Return once the in-memory view includes every write acknowledged before the call.

        :raises KeyStateError: the tail did not get there within ``timeout`` seconds.
        """
        if self._live_from is None:
            raise KeyStateError("KeyStateStore.start() must be called before reading")
        deadline = time.monotonic() + timeout
        end = self._end_offset(timeout)
        with self._cond:
            while self._position < end:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed.is_set():
                    raise KeyStateError(
                        f"reading {self.topic!r} reached offset {self._position} of {end} "
                        f"within {timeout:.0f}s"
                    )
                self._cond.wait(remaining)

    def load(
        self, partitions: list[tuple[str, int]], timeout: float
    ) -> dict[tuple[str, int], set[bytes | None]]:
        """The parked keys of ``partitions``, as of now (see :meth:`sync`); for their new owner.

        Blocked entries of these partitions are cleared on the way: a block lives in the memory
        of the member that hit it, so after a move the record is redelivered, tried again and,
        if it fails again, recorded again. The clean-up is not a release (no ``on_release``).
        """
        self.sync(timeout)
        wanted = set(partitions)
        parked: dict[tuple[str, int], set[bytes | None]] = {tp: set() for tp in partitions}
        stale: list[KeyId] = []
        with self._cond:
            for key_id, state in self._states.items():
                tp = (key_id[0], key_id[1])
                if tp in wanted:
                    if state.state == "parked":
                        parked[tp].add(key_id[2])
                    else:
                        stale.append(key_id)
        for key_id in stale:
            self._produce(encode_key(*key_id), None, lambda err, _msg: None)
        return parked

    def get(self, topic: str, partition: int, key: bytes | None) -> KeyState | None:
        """The state of one key in the in-memory view (call :meth:`sync` first for "now")."""
        with self._cond:
            return self._states.get((topic, partition, key))

    def snapshot(self) -> list[dict[str, object]]:
        """Every parked or blocked key, for ``keyshared status``; keys as text or hex."""
        with self._cond:
            items = sorted(self._states.items(), key=lambda item: _sort_key(item[0]))
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
    ) -> None:
        """Record ``key`` as parked; ``on_durable`` runs once the broker acknowledged it.

        A failed write is logged and retried with a capped backoff while ``still_wanted()``;
        when the partition has moved on, its next owner parks the key again if it must.
        """
        record_key = encode_key(topic, partition, key)
        value = _encode_state(KeyState("parked", offset, time.time()))
        where = f"key {key!r:.80} of {topic}[{partition}] (offset {offset})"

        def attempt(failures: int) -> None:
            if not self._closed.is_set() and still_wanted():
                self._produce(record_key, value, lambda err, _msg: report(err, failures))

        def report(err: KafkaError | None, failures: int) -> None:
            if err is None:
                try:
                    on_durable()
                except Exception:
                    log.exception("completing the park of %s failed", where)
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
        value = _encode_state(KeyState("blocked", offset, time.time(), error[:1000]))

        def report(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                log.warning("could not record blocked key %r of %s[%d] in %r: %s",
                            key, topic, partition, self.topic, err)  # fmt: skip

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

        self._produce(encode_key(topic, partition, key), None, report, headers=[_RELEASE])
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
            value = msg.value()
            state = None if value is None else KeyState(**json.loads(value))
        except (TypeError, ValueError, json.JSONDecodeError):
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
            and _RELEASE in (msg.headers() or ())
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

    def _ensure_topic(self, timeout: float, create: bool) -> None:
        admin = self._admin
        try:
            metadata = admin.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise KeyStateError(f"cannot reach Kafka to read {self.topic!r}: {exc}") from exc
        if self.topic in metadata.topics and metadata.topics[self.topic].error is None:
            return
        if not create:
            raise KeyStateError(f"no key state for group {self._group!r}: topic {self.topic!r} "
                                "does not exist (no member of that group ever blocked or parked "
                                "a key, or the group name is wrong)")  # fmt: skip
        replicas = min(3, len(metadata.brokers))
        new = NewTopic(self.topic, num_partitions=1, replication_factor=replicas,
                       config={"cleanup.policy": "compact"})  # fmt: skip
        try:
            admin.create_topics([new], operation_timeout=timeout)[self.topic].result(timeout)
            log.info("created key-state topic %r (compacted, %d replica(s))", self.topic, replicas)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KeyStateError(f"cannot create key-state topic {self.topic!r}: {exc}") from exc

    def _end_offset(self, timeout: float) -> int:
        """The topic's end offset; retried while a just-created topic has no leader yet."""
        tp = KafkaTopicPartition(self.topic, 0)
        deadline = time.monotonic() + timeout
        with self._watermarks_lock:
            while True:
                remaining = max(deadline - time.monotonic(), 0.1)
                try:
                    _low, high = self._watermarks.get_watermark_offsets(tp, remaining, cached=False)
                    return int(high)
                except KafkaException as exc:
                    err = exc.args[0]
                    transient = err.retriable() or err.code() in _NOT_READY_YET
                    if not transient or time.monotonic() >= deadline:
                        raise KeyStateError(
                            f"cannot read the end of {self.topic!r}: {err}"
                        ) from exc
                    time.sleep(0.1)


def _encode_state(state: KeyState) -> bytes:
    return json.dumps(asdict(state), separators=(",", ":")).encode()


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
