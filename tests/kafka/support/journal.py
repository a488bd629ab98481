"""Produce per-key sequenced records, read handler journals, and check order and completeness.

The records of a test carry their per-key sequence number (1, 2, ...) as the value. Handlers
journal a start and an end event per call (see ``journal_handler``), with one machine-wide
monotonic clock, so the journals of several processes merge into one timeline on which the
guarantees can be checked:

- completeness: every produced ``(key, seq)`` has at least one end event;
- per-key order: a start of ``seq`` n comes only after an end of ``seq`` n-1, and no two calls
  of one key overlap (a call of a killed process ends at the kill);
- replay order: within one process, the starts of a key go up strictly.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

REPO_ROOT = Path(__file__).resolve().parents[3]
HANDLER = "tests.kafka.support.journal_handler:handle"
ASYNC_HANDLER = "tests.kafka.support.journal_handler:handle_async"
BATCH_HANDLER = "tests.kafka.support.journal_handler:handle_batch"

RecordId = tuple[bytes | None, int]  # (key, seq)


# -- producing ---------------------------------------------------------------------------------


def sequenced(
    keys: list[bytes | None], per_key: int, seed: int = 7
) -> list[tuple[bytes | None, int]]:
    """``per_key`` records of every key, keys interleaved at random, seq 1.. per key in order."""
    order = [key for key in keys for _ in range(per_key)]
    random.Random(seed).shuffle(order)
    counters: dict[bytes | None, int] = defaultdict(int)
    out = []
    for key in order:
        counters[key] += 1
        out.append((key, counters[key]))
    return out


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, int]],
    *,
    extra: Mapping[str, object] | None = None,
) -> dict[int, int]:
    """Produce ``(key, seq)`` records (value = seq) idempotently; return records per partition.

    Idempotence keeps librdkafka's retries from reordering a partition, which would look like a
    per-key order violation that the consumer did not cause.
    """
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            **(extra or {}),
        }
    )
    counts: dict[int, int] = defaultdict(int)
    errors: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            counts[msg.partition()] += 1  # type: ignore[attr-defined]

    for key, seq in records:
        while True:
            try:
                producer.produce(topic, key=key, value=str(seq).encode(), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
    remaining = producer.flush(60)
    assert remaining == 0 and not errors, f"produce failed: {remaining} left, errors {errors[:3]}"
    return dict(counts)


# -- reading journals --------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    kind: str  # "S" start, "E" end, "K" end forced by killing the process
    key: bytes | None
    seq: int
    pid: int
    partition: int
    offset: int
    t: int  # CLOCK_MONOTONIC ns
    attempt: int
    thread: int = 0  # the native id of the thread that journaled it


def parse_event(line: str) -> Event | None:
    """One journal line as an event; None for a line torn by a kill."""
    parts = line.split()
    if len(parts) != 9:
        return None
    kind, key, seq, pid, partition, offset, t, attempt, thread = parts
    return Event(
        kind,
        None if key == "-" else bytes.fromhex(key),
        int(seq),
        int(pid),
        int(partition),
        int(offset),
        int(t),
        int(attempt),
        int(thread),
    )


def read_journal(path: Path) -> list[Event]:
    if not path.exists():
        return []
    events = (parse_event(line) for line in path.read_text().splitlines())
    return [event for event in events if event is not None]


def finished(events: Iterable[Event]) -> set[RecordId]:
    return {(e.key, e.seq) for e in events if e.kind == "E"}


def count_finished(path: Path) -> int:
    """Distinct finished records in a journal (cheap enough to poll)."""
    return len(finished(read_journal(path)))


@dataclass
class Report:
    expected: int
    finished: int = 0
    missing: list[RecordId] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    duplicates: int = 0  # records that finished more than once
    duplicate_ids: list[RecordId] = field(default_factory=list)
    calls: int = 0

    def summary(self) -> str:
        return (
            f"expected={self.expected} finished={self.finished} calls={self.calls} "
            f"missing={len(self.missing)} duplicates={self.duplicates} "
            f"violations={len(self.violations)}: {self.violations[:5]} missing: {self.missing[:5]}"
        )


def check(
    events: list[Event],
    expected: Mapping[bytes | None, int],
    killed: Mapping[int, int] | None = None,
    skipped: Mapping[bytes | None, Collection[int]] | None = None,
) -> Report:
    """Check completeness and per-key order of ``events`` against ``expected`` (key -> count).

    :param killed: pid -> monotonic ns of its SIGKILL; a call of that pid that never ended is
        taken to end there (its effects stop at the kill).
    :param skipped: key -> sequence numbers that were never to finish (records deleted with
        their topic, the chaos runs' rewind): not missing, and a key's next record follows the
        last one before them that was to finish.
    """
    killed = dict(killed or {})
    skipped = skipped or {}
    report = Report(expected=sum(expected.values()))
    done = finished(events)
    report.finished = len(done)
    report.missing = [
        (k, s)
        for k, n in expected.items()
        for s in range(1, n + 1)
        if (k, s) not in done and s not in skipped.get(k, ())
    ]
    ends: dict[RecordId, int] = defaultdict(int)
    by_key: dict[bytes | None, list[Event]] = defaultdict(list)
    for event in events:
        by_key[event.key].append(event)
        if event.kind == "E":
            ends[(event.key, event.seq)] += 1
        else:
            report.calls += 1
    report.duplicate_ids = sorted((rid for rid, n in ends.items() if n > 1), key=repr)
    report.duplicates = len(report.duplicate_ids)
    for key, key_events in by_key.items():
        _check_key(key, key_events, killed, report.violations, skipped.get(key, ()))
    return report


def _check_key(
    key: bytes | None,
    events: list[Event],
    killed: Mapping[int, int],
    violations: list[str],
    skipped: Collection[int] = (),
) -> None:
    open_calls: dict[tuple[int, int], Event] = {}  # (pid, seq) -> start
    for event in events:
        if event.kind == "S":
            open_calls[(event.pid, event.seq)] = event
        else:
            open_calls.pop((event.pid, event.seq), None)
    timeline = list(events)
    for (pid, seq), start in open_calls.items():
        if pid in killed:
            # Killed at ``killed[pid]``, recorded just before the signal: a call the victim
            # started in between (a loaded machine can take that long to deliver it) ended with
            # the process, after its own start, not before it.
            ended = max(killed[pid], start.t + 1)
            timeline.append(
                Event("K", key, seq, pid, start.partition, start.offset, ended, start.attempt)
            )
        else:
            violations.append(f"key {key!r} seq {seq}: started in {pid}, never ended, not killed")
    # At equal times an end sorts first: the next start can only follow it.
    timeline.sort(key=lambda e: (e.t, e.kind == "S"))
    running: dict[tuple[int, int], Event] = {}
    ended: set[int] = set()
    last_start: dict[int, int] = {}
    for event in timeline:
        if event.kind == "S":
            if running:
                other = next(iter(running.values()))
                violations.append(
                    f"key {key!r}: seq {event.seq} (pid {event.pid}) started while seq "
                    f"{other.seq} (pid {other.pid}) was running"
                )
            previous_seq = event.seq - 1
            while previous_seq in skipped:
                previous_seq -= 1
            if previous_seq >= 1 and previous_seq not in ended:
                violations.append(
                    f"key {key!r}: seq {event.seq} (pid {event.pid}) started before seq "
                    f"{previous_seq} ever finished"
                )
            previous = last_start.get(event.pid)
            if previous is not None and event.seq <= previous and event.attempt == 1:
                violations.append(
                    f"key {key!r}: pid {event.pid} started seq {event.seq} after seq {previous}"
                )
            last_start[event.pid] = event.seq
            running[(event.pid, event.seq)] = event
        else:
            running.pop((event.pid, event.seq), None)
            if event.kind == "E":
                ended.add(event.seq)


# -- offsets -----------------------------------------------------------------------------------


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ks-test-watermarks"})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> dict[int, tuple[int, str]]:
    """The group's committed ``(offset, metadata)`` per partition (offset -1001: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        result = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return {tp.partition: (tp.offset, tp.metadata or "") for tp in result}
    finally:
        consumer.close()


def wait_for(
    condition: Callable[[], object], timeout: float, what: str, interval: float = 0.2
) -> object:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def wait_committed_to_end(bootstrap: str, group: str, topic: str, timeout: float = 20.0) -> None:
    """Wait until the group's committed offset equals the high watermark on every partition."""
    ends = high_watermarks(bootstrap, topic)
    last: dict[int, tuple[int, str]] = {}

    def at_end() -> bool:
        last.update(committed(bootstrap, group, topic))
        # An empty partition has nothing to commit.
        return all(last.get(p, (-1, ""))[0] == end or end == 0 for p, end in ends.items())

    try:
        wait_for(at_end, timeout, "committed offsets to reach the end", interval=0.5)
    except AssertionError:
        raise AssertionError(
            f"committed offsets { ({p: o for p, (o, _) in last.items()}) } never reached the "
            f"high watermarks {ends}"
        ) from None


def delete_group(bootstrap: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_consumer_groups([group], request_timeout=10).values():
        try:
            future.result(10)
        except Exception:  # best effort clean-up
            continue


# -- consumer subprocesses -----------------------------------------------------------------------


def keyshared_command() -> list[str]:
    """The ``keyshared`` console script of this interpreter (falls back to ``main()``)."""
    script = Path(sys.executable).parent / "keyshared"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from keyshared.cli import main; main()"]


def start_consumer(
    bootstrap: str,
    group: str,
    topic: str,
    journal: Path,
    *,
    workers: int = 8,
    sleep_ms: str = "0,0",
    env: Mapping[str, str] | None = None,
    args: Iterable[str] = (),
    log: Path | None = None,
    handler: str = HANDLER,
) -> subprocess.Popen[bytes]:
    """``keyshared run`` the journaling handler in a subprocess (cwd: the repository root)."""
    environment = {
        **os.environ,
        "KS_JOURNAL": str(journal),
        "KS_SLEEP_MS": sleep_ms,
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    command = [
        *keyshared_command(),
        "run",
        handler,
        "-b",
        bootstrap,
        "-g",
        group,
        "-t",
        topic,
        "--workers",
        str(workers),
        "--poison",
        "drop",
        *args,
    ]
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(
            command, cwd=REPO_ROOT, env=environment, stdout=out, stderr=subprocess.STDOUT
        )
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]


def terminate(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    """SIGTERM and wait: the consumer drains and commits; return its exit code."""
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout)


def kill_all(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    """Clean-up: SIGKILL whatever is still running."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def assigned_in_log(log: Path) -> bool:
    """Whether the consumer's log says it got an assignment (it is a group member)."""
    return log.exists() and "assigned" in log.read_text(errors="replace")
