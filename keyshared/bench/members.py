"""Group members for the rebalance scenario: keyshared or plain, started and stopped on demand.

Both kinds log ``(time, member, partition)`` for every record they finish, so hand-over times
are computed afterwards from the log, the same way for both, instead of being sampled live.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from confluent_kafka import Consumer

from keyshared.record import Record

__all__ = ["Event", "Member", "PlainMember", "ThreadedMember"]

Event = tuple[float, str, int]  # monotonic time, member name, partition


class Member(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> float:
        """Leave the group; return the seconds it took (drain and commit included)."""
        ...


class ThreadedMember:
    """A KeySharedConsumer in a thread, with a sleeping handler that logs what it finished."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        topic: str,
        handler_s: float,
        workers: int,
        log: list[Event],
    ) -> None:
        from keyshared.consumer.key_shared_consumer import KeySharedConsumer

        self.name = name

        def handle(record: Record) -> None:
            time.sleep(handler_s)
            log.append((time.monotonic(), name, record.partition))

        self.consumer = KeySharedConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name},
            [topic],
            handle,
            workers=workers,
        )
        self._thread = threading.Thread(target=self.consumer.run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> float:
        began = time.monotonic()
        self.consumer.stop()
        self._thread.join(120)
        return time.monotonic() - began


class PlainMember:
    """A plain confluent-kafka consumer (cooperative-sticky) handling records one by one."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        topic: str,
        handler_s: float,
        log: list[Event],
    ) -> None:
        self.name = name
        self._handler_s = handler_s
        self._log = log
        self._stop = threading.Event()
        self._config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky",
        }
        self._topic = topic
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        consumer = Consumer(self._config)
        consumer.subscribe([self._topic])
        try:
            while not self._stop.is_set():
                for message in consumer.consume(100, 0.1):
                    if message.error() is None:
                        time.sleep(self._handler_s)
                        self._log.append((time.monotonic(), self.name, message.partition() or 0))
        finally:
            consumer.close()

    def stop(self) -> float:
        began = time.monotonic()
        self._stop.set()
        self._thread.join(120)
        return time.monotonic() - began
