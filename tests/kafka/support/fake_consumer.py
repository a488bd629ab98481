"""A scripted stand-in for the part of confluent-kafka's ``Consumer`` that the poll loop uses.

Only for fast, deterministic tests of the adapters (poll loop, committer, dispatcher): the
interleavings that matter here (an assignment arriving during shutdown, a commit refused with
ILLEGAL_GENERATION, offsets with gaps) are rare on a real broker and exact here. It is used in
addition to the real-broker tests, never instead of them.

Everything happens on the thread that calls ``consume``, as with librdkafka: rebalance
callbacks and commit callbacks are served from inside ``consume``.

Example::

    fake = FakeConsumer()
    fake.then_assign(("t", 0))                       # next consume(): on_assign([t[0]])
    fake.then_deliver(records("t", 0, [(0, b"a"), (2, b"b")]))   # offsets with a gap
    fake.then(lambda: stop.set())                    # any callable, run inside consume()
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

__all__ = ["FakeConsumer", "FakeMessage", "records"]

TP = tuple[str, int]


@dataclass
class FakeMessage:
    """The ``confluent_kafka.Message`` methods keyshared reads."""

    _topic: str
    _partition: int
    _offset: int
    _key: bytes | None
    _value: bytes | None = b""
    _headers: list[tuple[str, bytes]] | None = None
    _timestamp: tuple[int, int] = (1, 1_700_000_000_000)
    _error: KafkaError | None = None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp

    def error(self) -> KafkaError | None:
        return self._error


def records(topic: str, partition: int, items: Iterable[tuple[int, bytes | None]]) -> list[Any]:
    """Messages of one partition from ``(offset, key)`` pairs (offsets may have gaps)."""
    return [FakeMessage(topic, partition, offset, key, b"v%d" % offset) for offset, key in items]


@dataclass
class CommitCall:
    offsets: list[tuple[str, int, int, str]]  # topic, partition, offset, metadata
    asynchronous: bool
    refused: bool


@dataclass
class FakeConsumer:
    """Scripted: each ``consume`` runs the next step of the script, or returns nothing.

    :param refuse_commits: a KafkaError code that every commit fails with until cleared
        (``ILLEGAL_GENERATION`` for a commit racing a rebalance).
    """

    refuse_commits: int | None = None
    script: deque[Callable[[], list[Any]]] = field(default_factory=deque)
    committed_offsets: dict[TP, tuple[int, str]] = field(default_factory=dict)
    commits: list[CommitCall] = field(default_factory=list)
    positions: dict[TP, int] = field(default_factory=dict)
    high_watermarks: dict[TP, int] = field(default_factory=dict)
    assigned: set[TP] = field(default_factory=set)
    paused: set[TP] = field(default_factory=set)
    watermark_queries: list[TP] = field(default_factory=list)  # uncached: sent to the broker
    seeks: list[tuple[TP, int]] = field(default_factory=list)
    refuse_seeks: int = 0  # seeks refused (librdkafka: "Erroneous state") before one is taken
    on_commit: Callable[[Any, list[TopicPartition]], None] | None = None
    closed: bool = False
    idle: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._callbacks: dict[str, Callable[..., None]] = {}
        self._pending_commit_callbacks: list[tuple[Any, list[TopicPartition]]] = []

    # -- scripting -----------------------------------------------------------------------------

    def then(self, action: Callable[[], Any]) -> FakeConsumer:
        """Run ``action`` inside the next free ``consume`` call (it returns no records)."""

        def step() -> list[Any]:
            action()
            return []

        self.script.append(step)
        return self

    def then_wait_for(self, condition: Callable[[], bool]) -> FakeConsumer:
        """Idle consume calls (the loop goes round) until ``condition()`` holds."""

        def step() -> list[Any]:
            if not condition():
                self.script.appendleft(step)
                threading.Event().wait(0.002)
            return []

        self.script.append(step)
        return self

    def then_assign(self, *tps: TP, committed: dict[TP, tuple[int, str]] | None = None) -> Any:
        """on_assign(tps) inside the next consume, with these committed offsets on the broker."""

        def step() -> list[Any]:
            self.committed_offsets.update(committed or {})
            self._callbacks["on_assign"](self, [TopicPartition(t, p) for t, p in tps])
            self.assigned.update(tps)
            return []

        self.script.append(step)
        return self

    def then_revoke(self, *tps: TP) -> FakeConsumer:
        def step() -> list[Any]:
            self._callbacks["on_revoke"](self, [TopicPartition(t, p) for t, p in tps])
            self.assigned.difference_update(tps)
            self.paused.difference_update(tps)
            return []

        self.script.append(step)
        return self

    def then_lose(self, *tps: TP) -> FakeConsumer:
        def step() -> list[Any]:
            self._callbacks["on_lost"](self, [TopicPartition(t, p) for t, p in tps])
            self.assigned.difference_update(tps)
            return []

        self.script.append(step)
        return self

    def then_deliver(self, messages: list[Any]) -> FakeConsumer:
        """Return these messages from the next consume; positions move past them."""

        def step() -> list[Any]:
            for msg in messages:
                tp = (msg.topic(), msg.partition())
                self.positions[tp] = max(self.positions.get(tp, 0), msg.offset() + 1)
            return list(messages)

        self.script.append(step)
        return self

    # -- the Consumer surface ------------------------------------------------------------------

    def subscribe(self, topics: list[str], **callbacks: Callable[..., None]) -> None:
        self._callbacks = callbacks

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        self._serve_commit_callbacks()
        if self.script:
            return self.script.popleft()()
        self.idle.set()
        # A real consume blocks up to ``timeout``; a short nap keeps an idle loop from spinning.
        threading.Event().wait(min(timeout, 0.002) if timeout > 0 else 0.002)
        return []

    def _serve_commit_callbacks(self) -> None:
        pending, self._pending_commit_callbacks = self._pending_commit_callbacks, []
        for err, tps in pending:
            if self.on_commit is not None:
                self.on_commit(err, tps)

    def commit(
        self, offsets: list[TopicPartition] | None = None, asynchronous: bool = True
    ) -> list[TopicPartition] | None:
        assert offsets is not None, "keyshared always commits explicit offsets"
        refused = self.refuse_commits is not None
        self.commits.append(
            CommitCall(
                [(tp.topic, tp.partition, tp.offset, tp.metadata or "") for tp in offsets],
                asynchronous,
                refused,
            )
        )
        if refused:
            err = KafkaError(self.refuse_commits)
            if asynchronous:
                self._pending_commit_callbacks.append((err, offsets))
                return None
            raise KafkaException(err)
        for tp in offsets:
            self.committed_offsets[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
        if asynchronous:
            self._pending_commit_callbacks.append((None, offsets))
            return None
        return offsets

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> Any:
        out = []
        for tp in partitions:
            offset, metadata = self.committed_offsets.get((tp.topic, tp.partition), (-1001, ""))
            committed = TopicPartition(tp.topic, tp.partition, offset)
            if metadata:
                committed = TopicPartition(tp.topic, tp.partition, offset, metadata=metadata)
            out.append(committed)
        return out

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition), -1))
            for tp in partitions
        ]

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        if not cached:
            self.watermark_queries.append((tp.topic, tp.partition))
        return 0, self.high_watermarks.get((tp.topic, tp.partition), -1001)

    def seek(self, partition: TopicPartition) -> None:
        tp = (partition.topic, partition.partition)
        if self.refuse_seeks > 0:
            self.refuse_seeks -= 1
            raise KafkaException(KafkaError(KafkaError._STATE))
        self.seeks.append((tp, partition.offset))
        self.positions[tp] = partition.offset

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused.update((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused.difference_update((tp.topic, tp.partition) for tp in partitions)

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in sorted(self.assigned)]

    def close(self) -> None:
        self.closed = True

    def last_commit_of(self, tp: TP) -> tuple[int, str] | None:
        """The offset and metadata of the last accepted commit of ``tp``."""
        return self.committed_offsets.get(tp)
