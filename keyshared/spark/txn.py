"""One Kafka transaction per Spark task: how a retried task neither duplicates nor reorders.

A Spark task may run more than once: it fails and is retried, its executor is lost, or a
speculative copy starts. Each attempt of task ``t`` of run ``r`` uses the transactional id
``keyshared-<job>-<r>-<t>``, so:

1. ``init_transactions`` of a new attempt **fences** every earlier attempt of the same task
   (their further writes and commits fail) and completes or aborts its open transaction.
2. The attempt writes all of its records in **one** transaction and commits once, at the end.
   An attempt that dies before the commit leaves only aborted records, which ``read_committed``
   consumers (librdkafka's default, so keyshared's) never see.
3. An attempt that died **after** its commit (the task failed on the way back to the driver)
   must not write again: every record carries ``keyshared.<job>.run`` and ``.task`` headers,
   and a retry (``attemptNumber() > 0``) first scans the target partitions from the offsets
   they had when the run started for a committed record of its own task. Found: the earlier
   commit stands and the retry writes nothing.

Within one attempt records are produced in the task's order with an idempotent producer to
explicit partitions, so the order of a key's records in its partition is the task's order.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

__all__ = ["Headers", "TaskTransaction", "TransactionSettings"]

Headers = list[tuple[str, str | bytes | None]]

_SCAN_IDLE_S = 1.0  # a scan ends once every partition reported its end (or this long idle)


@dataclass(frozen=True)
class TransactionSettings:
    """What every task of a run needs to write transactionally (pickled to the executors).

    :param job: ``replay`` or ``reprocess``: names the headers and the transactional ids.
    :param run_id: unique per run; part of every transactional id.
    :param client: confluent-kafka client properties (bootstrap servers, security).
    :param start_offsets: ``{(topic, partition): offset}`` of every target partition when the
        run started: where a retry scans for its own earlier commit.
    :param transaction_timeout_ms: a task's transaction must commit within this (the broker
        caps it at ``transaction.max.timeout.ms``, 15 minutes by default).
    """

    job: str
    run_id: str
    client: Mapping[str, Any]
    start_offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    transaction_timeout_ms: int = 900_000
    timeout_s: float = 60.0

    @property
    def run_header(self) -> str:
        return f"keyshared.{self.job}.run"

    @property
    def task_header(self) -> str:
        return f"keyshared.{self.job}.task"


class TaskTransaction:
    """The transactional producer of one task attempt.

    Example (inside a task)::

        txn = TaskTransaction(settings, task=ctx.partitionId(), attempt=ctx.attemptNumber())
        if not txn.already_committed():
            txn.produce("orders", 3, key, value, headers)
            txn.flush()             # acknowledgements, offsets known; still uncommitted
            txn.commit()
    """

    def __init__(self, settings: TransactionSettings, task: int, attempt: int) -> None:
        self.settings = settings
        self.task = task
        self.attempt = attempt
        self.transactional_id = f"keyshared-{settings.job}-{settings.run_id}-{task}"
        self._producer = Producer({
            **settings.client,
            "transactional.id": self.transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            "transaction.timeout.ms": settings.transaction_timeout_ms,
            "linger.ms": 5,
            "allow.auto.create.topics": False,
        })  # fmt: skip
        self._producer.init_transactions(settings.timeout_s)
        self._open = False
        self._failure: KafkaError | None = None
        self.tags: Headers = [
            (settings.run_header, settings.run_id.encode()),
            (settings.task_header, str(task).encode()),
        ]

    def already_committed(self) -> bool:
        """Whether an earlier attempt of this task committed (only checked on a retry)."""
        if self.attempt == 0 or not self.settings.start_offsets:
            return False
        return _find_commit(self.settings, str(self.task).encode())

    def produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_offset: Any = None,
    ) -> None:
        """Queue one record (in a transaction begun on first use); ``on_offset(offset)`` runs
        on its acknowledgement, inside :meth:`flush`."""
        if not self._open:
            self._producer.begin_transaction()
            self._open = True

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self._failure = self._failure or err
            elif on_offset is not None:
                on_offset(msg.offset())

        while True:
            try:
                self._producer.produce(topic, value=value, key=key, headers=headers + self.tags,
                                       partition=partition, on_delivery=delivered)  # fmt: skip
                return
            except BufferError:
                self._producer.poll(0.1)  # local queue full: serve acknowledgements first

    def flush(self) -> None:
        """Wait for every queued record's acknowledgement.

        :raises KafkaException: a record was refused (the task fails, its transaction aborts).
        """
        left = self._producer.flush(self.settings.timeout_s)
        if self._failure is not None:
            raise KafkaException(self._failure)
        if left:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{left} records unacked"))

    def commit(self) -> None:
        """Flush and commit this attempt's one transaction (no-op if nothing was written)."""
        if self._open:
            self.flush()
            self._producer.commit_transaction(self.settings.timeout_s)
            self._open = False


def _find_commit(settings: TransactionSettings, task: bytes) -> bool:
    """Scan the target partitions (read_committed) from the run's start for a record of this
    run and task. ``init_transactions`` has already settled the earlier attempts."""
    consumer = Consumer({
        **settings.client,
        "group.id": f"keyshared-{settings.job}-check-{settings.run_id}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
    })  # fmt: skip
    run = settings.run_id.encode()
    try:
        consumer.assign(
            [TopicPartition(t, p, o) for (t, p), o in sorted(settings.start_offsets.items())]
        )
        waiting = set(settings.start_offsets)
        idle_since = time.monotonic()
        while waiting and time.monotonic() - idle_since < settings.timeout_s:
            msg = consumer.poll(_SCAN_IDLE_S)
            if msg is None:
                continue
            idle_since = time.monotonic()
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    waiting.discard((msg.topic(), msg.partition()))
                    continue
                raise KafkaException(err)
            headers = dict(msg.headers() or ())
            ours = headers.get(settings.run_header) == run
            if ours and headers.get(settings.task_header) == task:
                return True
        if waiting:
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, f"could not scan {sorted(waiting)} to the end")
            )
        return False
    finally:
        consumer.close()
