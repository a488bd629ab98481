"""The processes of a chaos run: the ``keyshared run`` members and the paced producer."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path

from confluent_kafka import Producer

from tests.chaos.plan import KAFKA_SESSION_MS, QUIET, ChaosPlan
from tests.kafka.support.journal import (
    kill_all,
    start_consumer,
)

# -- members -----------------------------------------------------------------------------------

_PID_TRIES = 20  # starts of one member before giving up on getting a pid no member had


class Members:
    """The member processes of a run, restartable under fresh names (``M1``, ``M1.2``, ...).

    A replacement gets a new name: a member id stays registered in ZooKeeper until the killed
    process's session expires, and a supervisor that restarts a pod gives it a new identity too.
    """

    def __init__(
        self,
        plan: ChaosPlan,
        bootstrap: str,
        zookeeper: str,
        group: str,
        topic: str,
        workdir: Path,
        out_topic: str | None = None,
        *,
        source: Path | None = None,
    ) -> None:
        """:param source: the source tree the members import keyshared from (their
        ``PYTHONPATH``), to run another version's members under this harness; default: the
        tree the tests run from."""
        self.plan, self.bootstrap, self.zookeeper = plan, bootstrap, zookeeper
        self.source = source
        self.group, self.topic, self.workdir = group, topic, workdir
        self.out_topic = out_topic  # exactly-once runs: where the handlers write their outputs
        self.journal = workdir / "journal"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.names_by_pid: dict[int, str] = {}
        self.killed: dict[int, int] = {}  # pid -> t of its SIGKILL
        self._generation: dict[str, int] = defaultdict(int)

    def args(self, name: str) -> list[str]:
        plan = self.plan
        args = [
            "--commit-interval", str(plan.commit_interval),
            "--max-attempts", str(plan.max_attempts),
            "--poison", "block" if plan.mode == "exclusive" else "dead_letter",
            "-X", f"client.id={name}",
        ]  # fmt: skip
        if plan.retry_backoff is not None:
            args += ["--retry-backoff", str(plan.retry_backoff)]
        if plan.group_protocol == "consumer":
            # KIP-848: the session and heartbeat are the group's (set by the harness), and
            # librdkafka rejects them in a consumer's config.
            args += ["-X", "group.protocol=consumer"]
        else:
            args += [
                "-X", f"session.timeout.ms={KAFKA_SESSION_MS}",
                "-X", "heartbeat.interval.ms=1000",
            ]  # fmt: skip
        if plan.mode == "partition":
            args += ["--mode", "partition", "--no-partition-leases"]
        elif plan.mode == "partition_leases":
            args += ["--mode", "partition", "--partition-leases"]
        else:
            args += ["--mode", plan.mode]
        if plan.uses_zookeeper:
            args += ["--zookeeper", self.zookeeper, "--session-timeout", str(plan.session_timeout)]
        if plan.exactly_once:
            args.append("--exactly-once")
            if plan.mode != "exclusive":  # exclusive members share the active role's id
                args += ["--transactional-id", self.transactional_id(name)]
        return args

    def transactional_id(self, name: str) -> str:
        """The ``transactional.id`` of member ``name`` in the partition modes: one per slot,
        as a pod's name, so a replacement's ``init_transactions`` aborts what its killed
        predecessor left open at once, instead of blocking read_committed readers until the
        transaction times out."""
        return f"{self.group}-{self.slot_of(name)}"

    def start(self, slot: str) -> str:
        self._generation[slot] += 1
        generation = self._generation[slot]
        name = slot if generation == 1 else f"{slot}.{generation}"
        env = {
            "KS_FAIL_ONCE_RATE": str(self.plan.fail_once_rate),
            "KS_FAIL_ALWAYS_RATE": str(self.plan.fail_always_rate),
            "KS_SLOW_KEYS": f"{self.plan.slow_keys[0]},{self.plan.slow_keys[1]}",
        }
        if self.out_topic is not None:
            env["KS_OUT_TOPIC"] = self.out_topic
        if self.source is not None:
            env["PYTHONPATH"] = str(self.source)
        for _ in range(_PID_TRIES):
            proc = start_consumer(
                self.bootstrap, self.group, self.topic, self.journal, workers=self.plan.workers,
                sleep_ms=self.plan.sleep_ms, env=env, args=self.args(name),
                log=self.workdir / f"{name}.log",
            )  # fmt: skip
            if proc.pid not in self.names_by_pid:
                break
            # The kernel gave it the pid of an earlier member of this run (the pid space wraps
            # within a long run: every JVM thread takes a pid too). The journal and the judge
            # name a process by its pid, so this one must not live: killed before its
            # interpreter has started, it journals nothing. Two members with one pid made the
            # first 30-minute partition-lease run of 2026-11-26 report 1,132 overlaps that
            # never happened: the second kill's time was taken for the first one's.
            proc.kill()
            proc.wait(10)
        else:
            raise RuntimeError(f"no fresh pid for member {name} in {_PID_TRIES} starts")
        self.procs[name] = proc
        self.names_by_pid[proc.pid] = name
        return name

    @staticmethod
    def slot_of(name: str) -> str:
        return name.split(".")[0]

    def kill(self, name: str) -> tuple[int, int]:
        """SIGKILL ``name``; return its pid and the time by which it was dead.

        Not the time the signal was sent: the victim runs on until the kernel delivers it, and
        a short call may start and end in between. Judged against the earlier instant, such a
        call counted neither as in flight at the kill nor as finished before it, and its redo
        as unexplained (two of the 30-minute exclusive run of 2026-11-29)."""
        proc = self.procs.pop(name)
        proc.kill()
        proc.wait(10)
        t = time.monotonic_ns()
        self.killed[proc.pid] = t
        return proc.pid, t

    def terminate(self, name: str, timeout: float = 120.0) -> int:
        """SIGTERM ``name`` (once it catches the signal) and wait: it drains, writes its cursors
        and leaves. Its exit code; a member still running after ``timeout`` is SIGKILLed and
        recorded as killed (-9)."""
        proc = self.procs.pop(name)
        _await_catches(proc, signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.killed[proc.pid] = time.monotonic_ns()
            proc.kill()
            proc.wait(10)
            return -9

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def dump_stacks(self, timeout: float = 5.0) -> None:
        """Make every live member print its threads' stacks to its log (``keyshared run``
        dumps them on SIGUSR2), for a run that stalls; waits until each log shows them."""
        before = {name: len(self.log(name)) for name in self.procs}
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + timeout
        for name, size in before.items():
            while "most recent call first" not in self.log(name)[size:]:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)

    def stop_all(self, timeout: float = 60.0) -> dict[str, int]:
        """SIGTERM every member, then wait: each drains and commits. Name -> exit code.

        A member started a moment ago (a replacement for the last kill) gets its SIGTERM only
        once it catches the signal: before ``keyshared run`` installs its handler the
        interpreter dies of it (exit -15), which says nothing about keyshared's shutdown.
        """
        for proc in self.procs.values():
            _await_catches(proc, signal.SIGTERM)
            proc.send_signal(signal.SIGTERM)
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                codes[name] = -999
        kill_all(self.procs.values())
        self.procs.clear()
        return codes

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a stalled one must be able to die
        kill_all(self.procs.values())


def _await_catches(
    proc: subprocess.Popen[bytes], signum: signal.Signals, timeout: float = 30.0
) -> None:
    """Until ``proc`` has a handler for ``signum`` (its ``SigCgt`` mask in /proc), or exited."""
    deadline = time.monotonic() + timeout
    bit = 1 << (signum - 1)
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            return
        caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
        if int(caught.split()[1], 16) & bit:
            return
        time.sleep(0.05)


# -- production --------------------------------------------------------------------------------


class PacedProducer(threading.Thread):
    """Produces ``records`` at an even pace over ``seconds`` (idempotent: retries through a
    broker restart never reorder a partition)."""

    def __init__(
        self, bootstrap: str, topic: str, records: list[tuple[bytes | None, int]], seconds: float
    ) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.bootstrap, self.topic, self.records, self.seconds = bootstrap, topic, records, seconds
        self._allowed = 1.0  # share of the records it may produce now
        self._allowed_changed = threading.Condition()
        self.pauses: list[tuple[int, int]] = []  # (from, to) ns, monotonic: held by the schedule
        self.delivered = 0
        # (key, seq) -> CLOCK_MONOTONIC ns of its produce call, the journals' clock: a
        # record's latency to its handler's start
        self.sent_at: dict[tuple[bytes | None, int], int] = {}
        self._halt = threading.Event()
        self.holding = threading.Event()  # set while the schedule holds it back
        self._renew = False
        self.errors: list[str] = []
        self.failure: BaseException | None = None

    def allow_until(self, share: float) -> None:
        """Produce at most ``share`` of the records until allowed more; the pace resumes where
        it stopped, as if the wait had not been. The topology runs keep production in step
        with their schedule: a node fault that takes longer than planned (a broker restart on
        a loaded machine) must not see the rest of the records go by before the faults after
        it, which would then hit an idle group."""
        with self._allowed_changed:
            self._allowed = share
            self._allowed_changed.notify_all()

    def renew(self) -> None:
        """Produce with a new client once let go again (call while :attr:`holding`): the
        input topic was deleted and created again, and an idempotent producer's sequence
        numbers and cached metadata belong to the old topic."""
        with self._allowed_changed:
            self._renew = True

    def stop(self) -> None:
        """Produce nothing more (the records not sent yet are never sent: ``sent_at`` says
        which were); the ones sent are still flushed."""
        self._halt.set()

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # reported by the run, not lost in a thread
            self.failure = exc

    def _client(self) -> Producer:
        return Producer(
            {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5,
             "log_level": QUIET}
        )  # fmt: skip

    def _produce(self) -> None:
        producer = self._client()

        def delivered(err: object, msg: object) -> None:
            if err is None:
                self.delivered += 1
            else:
                self.errors.append(str(err))

        total = len(self.records)
        rate = total / self.seconds
        start = time.monotonic()
        for i, (key, seq) in enumerate(self.records):
            if i % 50 == 0:
                if self._halt.is_set():
                    break
                with self._allowed_changed:
                    held = time.monotonic_ns()
                    while i >= self._allowed * total:
                        self.holding.set()
                        producer.poll(0)
                        self._allowed_changed.wait(0.1)
                    self.holding.clear()
                    if self._renew:
                        producer.flush(30)
                        producer, self._renew = self._client(), False
                    released = time.monotonic_ns()
                if released - held > 1_000_000:
                    self.pauses.append((held, released))
                    start += (released - held) / 1e9  # the wait does not count as produced time
                ahead = start + i / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                producer.poll(0)
            self.sent_at[(key, seq)] = time.monotonic_ns()
            while True:
                try:
                    producer.produce(self.topic, key=key, value=str(seq).encode(),
                                     on_delivery=delivered)  # fmt: skip
                    break
                except BufferError:
                    producer.poll(0.1)
        left = producer.flush(180)
        if left:
            self.errors.append(f"{left} records still unacknowledged after 180 s")
