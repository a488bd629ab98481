"""Dead-letter writes whose success is the broker's acknowledgement, never a hope.

A poison record counts as done only once its dead letter is safe, so the writer reports success
strictly from the delivery report, and a failure (DLQ topic missing, broker down, authorization)
is logged, counted and retried with a capped backoff for as long as this member still owns the
source partition. DLQ topics are never auto-created: operators own their partitions, retention
and ACLs. Metadata is checked before producing, so a missing topic fails in milliseconds instead
of after ``message.timeout.ms``.

Each dead letter keeps the original key, value and headers byte for byte and adds provenance
headers (see :class:`DlqHeader`). Source partition ``p`` maps to DLQ partition
``p % dlq_partitions``; with one idempotent producer writing in call order, the dead letters of a
source partition keep their relative order.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Producer

from keyshared.core.redaction import Redactor
from keyshared.kafka.client_config import KEYED_PRODUCER, client_properties
from keyshared.kafka.dlq_headers import (
    MAX_ERROR_MESSAGE,
    MAX_TRACEBACK,
    DlqHeader,
    provenance_headers,
)
from keyshared.runtime.outputs import OutputMessage
from keyshared.runtime.sinks import Failure

if TYPE_CHECKING:
    from keyshared.metrics import ConsumerMetrics

__all__ = [
    "DLQ_MESSAGE_MAX_BYTES",
    "MAX_ERROR_MESSAGE",
    "MAX_TRACEBACK",
    "DeadLetterWriter",
    "DlqHeader",
    "provenance_headers",
    "retry_delay",
]

log = logging.getLogger(__name__)

MESSAGE_TIMEOUT_S = 30.0  # a broker outage surfaces as a failure (and a retry) within this
# librdkafka's client-side cap on a produce request defaults to 1 MB, which would refuse the
# dead letter of any record above it however large the DLQ topic allows (retried forever, the
# cursor held). The DLQ topic's max.message.bytes is the real bound and the broker enforces
# it; this cap only has to stay below the broker's socket.request.max.bytes (100 MiB). A
# ``message.max.bytes`` in the consumer config wins.
DLQ_MESSAGE_MAX_BYTES = 64 * 1024 * 1024
_METADATA_TTL_S = 60.0  # how long a DLQ topic's partition count is trusted
_METADATA_TIMEOUT_S = 5.0


def retry_delay(failures: int, initial: float, maximum: float) -> float:
    """Seconds before the next try after ``failures`` consecutive failures (1-based): doubling,
    capped, so an outage is probed quickly at first and then without hammering the broker."""
    return float(min(maximum, initial * 2 ** min(failures - 1, 30)))


@dataclass(eq=False)
class _Letter:
    """One dead letter on its way."""

    msg: Any  # the source confluent_kafka.Message
    dlq_topic: str
    headers: list[tuple[str, str | bytes | None]]
    still_wanted: Callable[[], bool]
    on_acked: Callable[[], None]
    on_abandoned: Callable[[], None] | None = None

    def __str__(self) -> str:
        return f"{self.msg.topic()}[{self.msg.partition()}]@{self.msg.offset()}"

    def abandon(self) -> None:
        """Not written (partition gone, writer closed): the record goes to the next owner, and
        stops counting as running here, or its partition's lease waits for it for good."""
        try:
            if self.on_abandoned is not None:
                self.on_abandoned()
        except Exception:
            log.exception("abandoning dead letter %s failed", self)

    @property
    def source_order(self) -> tuple[str, int, int]:
        return (self.msg.topic(), self.msg.partition(), self.msg.offset())


class DeadLetterWriter:
    """Writes dead letters to ``dlq_topic_for(source_topic)`` and reports the broker's ack.

    One daemon thread owns the producer: it checks metadata, produces and serves delivery
    reports, so :meth:`send` only enqueues and never blocks a worker. When writes to a DLQ topic
    fail, that topic backs off as a whole: its failed and newly arriving letters are held and
    retried together, in source order, so an outage neither floods the log nor reorders them.

    Example::

        writer = DeadLetterWriter(config, "orders", lambda t: f"{t}.dlq", metrics,
                                  scheduler.call_later)
        writer.send(msg, Failure(3, exc, "exhausted", tb, t0),
                    still_wanted=lambda: owned, on_acked=mark_done)
        writer.close(10.0)

    :param kafka_config: the consumer's confluent-kafka config; only its connection, security
        and identity properties are inherited by the producer.
    :param group: the consumer group, recorded in every dead letter.
    :param dlq_topic_for: the DLQ topic of a source topic.
    :param metrics: counts acknowledged and failed writes per DLQ topic.
    :param call_later: runs a callback after a delay; schedules the retries.
    :param initial_backoff: seconds before the first retry of a failing DLQ topic.
    :param max_backoff: cap of the retry delay: also the longest a recovered DLQ waits unused.
    :param redact: applied to the error message and traceback headers before they are cut to
        their bounds (``ConsumerOptions.redact``); the record itself is written unchanged.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        group: str,
        dlq_topic_for: Callable[[str], str],
        metrics: ConsumerMetrics,
        call_later: Callable[[float, Callable[[], None]], None],
        *,
        initial_backoff: float = 0.5,
        max_backoff: float = 10.0,
        redact: Redactor | None = None,
    ) -> None:
        self._redact = redact
        self._producer_config = {
            **client_properties(kafka_config),
            "enable.idempotence": True,  # broker-side dedup of librdkafka's own retries
            "acks": "all",
            "message.timeout.ms": int(MESSAGE_TIMEOUT_S * 1000),
            "allow.auto.create.topics": False,  # even where the broker would allow it
            "linger.ms": 5,
            **KEYED_PRODUCER,  # letters name their partition; agree with Java producers anyway
            "message.max.bytes": kafka_config.get("message.max.bytes", DLQ_MESSAGE_MAX_BYTES),
        }
        self._group = group
        self._dlq_topic_for = dlq_topic_for
        self._metrics = metrics
        self._call_later = call_later
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._producer = Producer(self._producer_config)
        self._fatal: KafkaError | None = None
        self._partitions: dict[str, tuple[int, float]] = {}  # topic -> (count, fetched at)
        self._held: dict[str, list[_Letter]] = {}  # DLQ topic backing off -> its letters
        self._failures: dict[str, int] = {}  # consecutive failures per DLQ topic
        # Letters to write; a str is a DLQ topic whose backoff is over; None wakes a close.
        self._inbox: queue.SimpleQueue[_Letter | str | None] = queue.SimpleQueue()
        self._closing = threading.Event()
        self._close_deadline = 0.0
        self._thread = threading.Thread(target=self._loop, name="keyshared-dlq", daemon=True)
        self._thread.start()

    def send(
        self,
        msg: Any,
        failure: Failure,
        *,
        still_wanted: Callable[[], bool],
        on_acked: Callable[[], None],
        on_abandoned: Callable[[], None] | None = None,
    ) -> None:
        """Queue ``msg`` (a confluent_kafka.Message) for its DLQ; ``on_acked`` runs once, on the
        writer's thread, after the broker acknowledged it, or else ``on_abandoned`` once, when
        the letter is given up (``still_wanted()`` turned False, or the writer closed). Returns
        at once."""
        headers = provenance_headers(msg, self._group, *failure, redact=self._redact)
        topic = self._dlq_topic_for(msg.topic())
        self._inbox.put(_Letter(msg, topic, headers, still_wanted, on_acked, on_abandoned))

    def letter(self, msg: Any, failure: Failure) -> OutputMessage:
        """``msg``'s dead letter as an exactly-once output of its record: the topic and
        headers :meth:`send` writes, left to the transaction that commits the record (its DLQ
        partition is ``msg``'s partition modulo the DLQ's, as here)."""
        headers = provenance_headers(msg, self._group, *failure, redact=self._redact)
        topic = self._dlq_topic_for(msg.topic())
        return OutputMessage(topic, msg.key(), msg.value(), headers, msg.partition())

    def close(self, timeout: float) -> None:
        """Write what is queued, wait up to ``timeout`` seconds for acks, stop the thread.

        Letters not acknowledged by then (or held by a failing DLQ) are abandoned: their source
        records are not done, so they are redelivered to the partition's next owner. Idempotent.
        """
        if self._closing.is_set():
            return
        self._close_deadline = time.monotonic() + timeout
        self._closing.set()
        self._inbox.put(None)
        self._thread.join(timeout + 1.0)
        if not self._thread.is_alive():
            self._abandon_all()
        if self._thread.is_alive() or len(self._producer):
            log.warning(
                "DLQ writer did not finish within %.1fs; unacknowledged dead letters "
                "will be redelivered from their source partitions",
                timeout,
            )
        else:
            self._producer.close()  # nothing left to write: disconnect now, not at GC

    # -- the writer thread ---------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            try:
                idle = len(self._producer) == 0
                item = self._inbox.get(timeout=0.5) if idle else self._inbox.get_nowait()
            except queue.Empty:
                item = None
            if isinstance(item, _Letter):
                self._submit(item)
            elif isinstance(item, str):
                self._wake(item)
            else:
                self._producer.poll(0.01)
                self._abandon_unwanted()
                if self._fatal is not None:
                    self._replace_producer(self._fatal)
                if (
                    self._closing.is_set()
                    and self._inbox.empty()
                    and (len(self._producer) == 0 or time.monotonic() > self._close_deadline)
                ):
                    return

    def _submit(self, letter: _Letter) -> None:
        held = self._held.get(letter.dlq_topic)
        if held is not None:
            held.append(letter)  # the topic is backing off; keep source order behind it
        elif letter.still_wanted():
            self._write(letter)
        else:
            letter.abandon()

    def _wake(self, dlq_topic: str) -> None:
        letters = sorted(self._held.pop(dlq_topic, ()), key=lambda letter: letter.source_order)
        if self._closing.is_set():
            for letter in letters:
                letter.abandon()  # not done, so redelivered to the partition's next owner
            return
        for letter in letters:
            self._submit(letter)

    def _abandon_unwanted(self) -> None:
        """Give up held letters of a partition gone now, not at their topic's next retry (up
        to ``max_backoff`` away): until then the partition's lease waits for them."""
        for topic, held in list(self._held.items()):
            if gone := [letter for letter in held if not letter.still_wanted()]:
                self._held[topic] = [letter for letter in held if letter not in gone]
                for letter in gone:
                    letter.abandon()

    def _abandon_all(self) -> None:
        """Closed, the writer thread ended: abandon what was not acknowledged."""
        self._producer.purge()  # in flight: their failure reports hold them below
        self._producer.poll(0)
        held, self._held = self._held, {}
        for letter in (letter for letters in held.values() for letter in letters):
            letter.abandon()

    def _write(self, letter: _Letter) -> None:
        try:
            dlq_partition = letter.msg.partition() % self._partition_count(letter.dlq_topic)
            while True:
                try:
                    self._producer.produce(
                        letter.dlq_topic,
                        key=letter.msg.key(),
                        value=letter.msg.value(),
                        headers=letter.headers,
                        partition=dlq_partition,
                        on_delivery=lambda err, _msg: self._delivered(letter, err),
                    )
                    return
                except BufferError:
                    self._producer.poll(0.1)  # local queue full: serve reports, then retry
        except (KafkaException, LookupError) as exc:
            self._failed(letter, str(exc.args[0] if exc.args else exc))

    def _partition_count(self, topic: str) -> int:
        cached = self._partitions.get(topic)
        if cached is not None and time.monotonic() - cached[1] < _METADATA_TTL_S:
            return cached[0]
        found = self._producer.list_topics(topic, timeout=_METADATA_TIMEOUT_S).topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            why = (
                found.error.str()
                if found is not None and found.error is not None
                else "no metadata"
            )
            raise LookupError(
                f"DLQ topic {topic!r} is unavailable ({why}); keyshared does not "
                "create DLQ topics, create it with the partitions you want"
            )
        self._partitions[topic] = (len(found.partitions), time.monotonic())
        return len(found.partitions)

    def _delivered(self, letter: _Letter, err: KafkaError | None) -> None:
        if err is not None:
            if err.fatal():
                self._fatal = err
            self._failed(letter, str(err))
            return
        self._failures.pop(letter.dlq_topic, None)
        self._metrics.dlq_written(letter.dlq_topic)
        try:
            letter.on_acked()
        except Exception:
            log.exception("completing dead-lettered %s failed", letter)

    def _failed(self, letter: _Letter, why: str) -> None:
        topic = letter.dlq_topic
        self._metrics.dlq_write_failed(topic)
        held = self._held.get(topic)
        if held is None:
            held = self._held[topic] = []
            self._partitions.pop(topic, None)  # re-read metadata on the next try
            failures = self._failures[topic] = self._failures.get(topic, 0) + 1
            delay = retry_delay(failures, self._initial_backoff, self._max_backoff)
            self._call_later(delay, lambda: self._inbox.put(topic))
            log.error("dead letter of %s to DLQ topic %r failed, the record stays incomplete; "
                      "retrying the topic in %.1fs: %s", letter, topic, delay, why)  # fmt: skip
        else:
            log.error("dead letter of %s to DLQ topic %r failed, retrying with the topic: %s",
                      letter, topic, why)  # fmt: skip
        held.append(letter)

    def _replace_producer(self, err: KafkaError) -> None:
        """A fatal producer error (e.g. broken idempotence state) poisons the instance: fail
        what it still holds (each is retried) and carry on with a fresh producer."""
        log.error("DLQ producer hit a fatal error, replacing it: %s", err)
        old, self._producer, self._fatal = self._producer, Producer(self._producer_config), None
        old.purge()
        old.poll(0)
