"""Exactly-once chaos runs: the output topic read back with ``read_committed`` and judged, the
producer fence the harness injects, and the members' own fences and redos read from their logs.

Each finished record writes its sequence number under its key to the output topic
(``tests.kafka.support.journal_handler``, ``KS_OUT_TOPIC``); a poison record is dead-lettered and
writes none. The output judge counts, over what a ``read_committed`` reader sees:

- **duplicates**: a ``(key, seq)`` seen more than once;
- **losses**: a ``(key, seq)`` produced and not dead-lettered (in the DLQ read with
  ``read_committed``) that has no output, and outputs of dead-lettered records (a record has
  either outputs or a dead letter, never both);
- **order breaks**: a key's output whose sequence number is below one seen before it (the outputs
  of one key go to one partition, read in offset order).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from keyshared.dev.topics import unique_name
from keyshared.kafka.active_role import active_role_transactional_id
from tests.chaos.fences import NEVER, Fence, parse_log_time
from tests.chaos.members import Members
from tests.chaos.plan import QUIET
from tests.kafka.support.journal import RecordId

Output = tuple[int, int, RecordId]  # (partition, offset, (key, seq)) as read


@dataclass
class OutputVerdict:
    """What the output judge found (empty lists: exactly once, in order)."""

    read: int = 0
    duplicates: list[str] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)
    order_breaks: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # partitions not read to their end


def judge_outputs(
    outputs: Iterable[Output], produced: Iterable[RecordId], dead_lettered: Iterable[RecordId]
) -> OutputVerdict:
    """Duplicates, losses and per-key order breaks of ``outputs`` (in read order per partition)
    against the records ``produced`` and those ``dead_lettered``."""
    verdict = OutputVerdict()
    seen: dict[RecordId, tuple[int, int]] = {}
    highest: dict[bytes | None, tuple[int, int, int]] = {}  # key -> (seq, partition, offset)
    for partition, offset, rid in outputs:
        verdict.read += 1
        key, seq = rid
        if rid in seen:
            first = seen[rid]
            verdict.duplicates.append(
                f"{rid!r} at [{partition}]@{offset}, first at [{first[0]}]@{first[1]}"
            )
            continue
        seen[rid] = (partition, offset)
        top = highest.get(key)
        if top is not None and seq < top[0]:
            verdict.order_breaks.append(
                f"{key!r}: seq {seq} at [{partition}]@{offset} after seq {top[0]} at "
                f"[{top[1]}]@{top[2]}"
            )
        else:
            highest[key] = (seq, partition, offset)
    dead = set(dead_lettered)
    for rid in produced:
        if rid in dead:
            if rid in seen:
                verdict.losses.append(f"{rid!r}: dead-lettered and also output")
        elif rid not in seen:
            verdict.losses.append(f"{rid!r}: finished, no output")
    return verdict


def read_outputs(
    bootstrap: str, topic: str, partitions: int, timeout: float = 60.0
) -> tuple[list[Output], list[str]]:
    """Every output a ``read_committed`` reader sees, per partition in offset order, up to the
    end of the log: a partition counts as read when the reader is at its end of file *and* its
    position reached the high watermark, so an open transaction (whose end is not stable yet)
    is waited for, not taken for the end. Returns the outputs and the partitions not read to
    their end within ``timeout``."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_name("chaos-output-reader"),
         "isolation.level": "read_committed", "enable.auto.commit": False,
         "enable.partition.eof": True, "log_level": QUIET}
    )  # fmt: skip
    outputs: list[Output] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        todo = set(range(partitions))
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        tp = TopicPartition(topic, msg.partition())
                        high = consumer.get_watermark_offsets(tp, timeout=10)[1]
                        position = consumer.position([tp])[0].offset
                        if position >= high:
                            todo.discard(msg.partition())
                    continue
                outputs.append((msg.partition(), msg.offset(), (msg.key(), int(msg.value()))))
        unread = [f"{topic}[{p}]" for p in sorted(todo)]
    finally:
        consumer.close()
    return outputs, unread


def fence_producer(bootstrap: str, transactional_id: str) -> None:
    """Fence the live producer of ``transactional_id``: ``init_transactions`` of a new producer
    bumps the id's epoch, so the broker refuses the old one's next transactional request. The
    new producer then goes away without a transaction (nothing of it stays open)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "log_level": QUIET}
    )
    producer.init_transactions(30)
    producer.flush(10)


def fenced_id(members: Members, name: str) -> str:
    """The transactional.id the fence fault takes over: the active role's in exclusive mode,
    else the member's own."""
    if members.plan.mode == "exclusive":
        return active_role_transactional_id(members.group)
    return members.transactional_id(name)


FENCED_LOG = "was fenced"
ROLE_GIVEN_UP = re.compile(r" gave the active role of \S+ up: its producer was fenced")
ACTIVE_LOG = re.compile(r" is the active member of \S+ \(token \d+\)")


def role_fences(members: Members, clock_offset_ns: int) -> list[Fence]:
    """Exclusive mode: the moments an active member gave the role up because the role's
    producer was fenced, from its log, as fences (every partition; judged like a lost
    partition's): what it finished since its last commit is redone by the next active member;
    if it becomes active again, it is a new member from that line on.

    The partition modes need nothing of their own: a failed transaction (a fence included)
    redoes its partitions through the consumer's ``lost`` and ``assigned`` lines, which
    :func:`tests.chaos.fences.fences_from_logs` reads already."""
    fences = []
    for pid, name in members.names_by_pid.items():
        lines = members.log(name).splitlines()
        for i, line in enumerate(lines):
            if not ROLE_GIVEN_UP.search(line):
                continue
            again = next(
                (
                    parse_log_time(later, clock_offset_ns)
                    for later in lines[i + 1 :]
                    if ACTIVE_LOG.search(later)
                ),
                NEVER,
            )
            fences.append(Fence(pid, parse_log_time(line, clock_offset_ns), again, None, "fenced"))
    return fences
