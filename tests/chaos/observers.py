"""What the harness watches from outside: journals, commits, the group's state, the DLQ and
``keyshared verify``."""

from __future__ import annotations

import bisect
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from keyshared.core.offsets import decode_finished
from keyshared.dev.topics import unique_name
from keyshared.kafka.dlq import DlqHeader
from tests.chaos.plan import QUIET
from tests.kafka.support.journal import (
    REPO_ROOT,
    Event,
    RecordId,
    keyshared_command,
    parse_event,
)

# -- progress and completion -------------------------------------------------------------------


class JournalTail:
    """Reads the journal incrementally: progress for the log, the active member for faults."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self.finished: set[RecordId] = set()
        self.last_pid = 0
        self.last_partition = 0
        # every first attempt that failed, in journal order: the rewind fault waits for one
        self.first_failures: list[Event] = []

    def poll(self) -> int:
        if not self.path.exists():
            return 0
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            parts = line.split()
            if len(parts) != 9:
                continue
            self.last_pid = int(parts[3])
            self.last_partition = int(parts[4])
            if parts[0] == b"E":
                key = None if parts[1] == b"-" else bytes.fromhex(parts[1].decode())
                self.finished.add((key, int(parts[2])))
            elif parts[0] == b"F" and parts[7] == b"1":
                failure = parse_event(line.decode())
                assert failure is not None  # nine fields, checked above
                self.first_failures.append(failure)
        return len(self.finished)


class CommitWatch:
    """The group's committed offsets against the topic's high watermarks (one client)."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int) -> None:
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "log_level": QUIET}
        )
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]
        self.bootstrap = bootstrap
        self.last: dict[int, int] = {}
        self.ends: dict[int, int] = {}

    def at_end(self) -> bool:
        try:
            self.ends = {
                tp.partition: self._consumer.get_watermark_offsets(tp, timeout=5)[1]
                for tp in self._tps
            }
            committed = self._consumer.committed(self._tps, timeout=5)
        except Exception:  # the broker may be restarting: not at the end yet
            return False
        self.last = {tp.partition: tp.offset for tp in committed}
        return all(self.last.get(p) == end for p, end in self.ends.items() if end > 0)

    def offsets(self) -> dict[int, int] | None:
        """The committed offset of each partition as Kafka has it (negative: none; None: the
        broker did not answer)."""
        try:
            committed = self._consumer.committed(self._tps, timeout=10)
        except Exception:
            return None
        return {tp.partition: tp.offset for tp in committed}

    def snapshot(self) -> dict[int, tuple[int, frozenset[int]]] | None:
        """What a new owner of each partition resumes from: the committed offset and the
        finished offsets above it that the commit's metadata carries (None: broker away)."""
        try:
            committed = self._consumer.committed(self._tps, timeout=10)
        except Exception:
            return None
        out = {}
        for tp in committed:
            cursor = max(tp.offset, 0)
            out[tp.partition] = (cursor, decode_finished(cursor, tp.metadata))
        return out

    def close(self) -> None:
        self._consumer.close()


class GroupStates:
    """The consumer group's state (Stable or not) every 100 ms, as seen by the group
    coordinator: evidence of when commits could go through. With Kafka's classic group protocol
    a member's commits are refused while its group rebalances, so a record finished then stays
    uncommitted until the rebalance ends. Sampled by ``group_state_probe`` in a subprocess,
    restarted whenever it dies (see its docstring); a gap of over a second between samples
    counts as not stable."""

    def __init__(self, bootstrap: str, group: str, path: Path) -> None:
        self._command = [
            sys.executable, "-m", "tests.chaos.group_state_probe", bootstrap, group, str(path)
        ]  # fmt: skip
        self._path = path
        self._proc = self._spawn()
        self._halt = threading.Event()
        self._watch = threading.Thread(target=self._respawn, name="chaos-group-states", daemon=True)
        self._watch.start()
        self.samples: list[tuple[int, bool]] = []
        self.restarts = 0

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self._command, cwd=REPO_ROOT, stderr=subprocess.DEVNULL)

    def _respawn(self) -> None:
        while not self._halt.wait(0.2):
            if self._proc.poll() is not None:
                self.restarts += 1
                self._proc = self._spawn()

    def close(self) -> None:
        self._halt.set()
        self._watch.join(10)
        self._proc.kill()
        self._proc.wait(10)
        samples = []
        for line in self._path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                samples.append((int(parts[0]), parts[1] == "1"))
        samples.sort()
        # a gap (the probe restarting) is unknown: record it as not stable
        out: list[tuple[int, bool]] = []
        for t, stable in samples:
            if out and t - out[-1][0] > 1_000_000_000:
                out.append((out[-1][0] + 1, False))
            out.append((t, stable))
        self.samples = out

    def longest_stable(self, lo: int, hi: int) -> float:
        """The longest stretch (seconds) within [lo, hi] over which every sample was Stable."""
        best = 0
        since: int | None = None
        i = bisect.bisect_left(self.samples, (lo, False))
        for t, stable in self.samples[i:]:
            if t > hi:
                break
            if stable:
                since = t if since is None else since
                best = max(best, t - since)
            else:
                since = None
        if since is not None:
            best = max(best, hi - since)
        return best / 1e9


@dataclass(frozen=True)
class DeadLetter:
    key: bytes | None
    seq: int
    source_partition: int
    source_offset: int
    reason: str
    attempts: int
    error_class: str
    error_message: str


def read_dlq(
    bootstrap: str, topic: str, partitions: int, *, committed: bool = False
) -> list[DeadLetter]:
    """Every record of the DLQ topic, from the beginning to the high watermark; ``committed``:
    only those of committed transactions (an exactly-once member's dead letters are outputs of
    its transactions: an aborted one's are not dead letters), up to each partition's end."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_name("chaos-dlq-reader"),
         "enable.auto.commit": False, "log_level": QUIET,
         **({"isolation.level": "read_committed", "enable.partition.eof": True}
            if committed else {})}
    )  # fmt: skip
    letters: list[DeadLetter] = []
    try:
        ends = {}
        for p in range(partitions):
            ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        todo = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in todo])
        deadline = time.monotonic() + 60
        while todo:
            assert time.monotonic() < deadline, f"DLQ not read to its end: {todo} left"
            msg = consumer.poll(1.0)
            if msg is not None and committed and msg.error() is not None:
                # at the end of what a read_committed reader sees: the last offsets of a
                # partition may be transaction markers, never delivered
                tp = TopicPartition(topic, msg.partition())
                if consumer.position([tp])[0].offset >= ends[msg.partition()]:
                    todo.discard(msg.partition())
                continue
            if msg is None or msg.error():
                continue
            headers: dict[str, str] = {}
            for name, value in msg.headers() or []:
                headers[name] = (value or b"").decode(errors="replace")  # the last one wins
            letters.append(
                DeadLetter(
                    msg.key(),
                    int(msg.value()),
                    int(headers.get(DlqHeader.SOURCE_PARTITION, "-1")),
                    int(headers.get(DlqHeader.SOURCE_OFFSET, "-1")),
                    headers.get(DlqHeader.REASON, ""),
                    int(headers.get(DlqHeader.ATTEMPTS, "0")),
                    headers.get(DlqHeader.ERROR_CLASS, ""),
                    headers.get(DlqHeader.ERROR_MESSAGE, ""),
                )
            )
            if msg.offset() + 1 >= ends[msg.partition()]:
                todo.discard(msg.partition())
    finally:
        consumer.close()
    return letters


def run_verify(bootstrap: str, group: str, topic: str) -> dict[str, object]:
    """``keyshared verify --json``: its verdict plus ``exit``."""
    done = subprocess.run(
        [*keyshared_command(), "verify", "-b", bootstrap, "-g", group, "-t", topic, "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    try:
        verdict: dict[str, object] = json.loads(done.stdout)
    except json.JSONDecodeError:
        verdict = {"problems": [{"detail": done.stdout[-500:] + done.stderr[-1500:]}]}
    verdict["exit"] = done.returncode
    return verdict
