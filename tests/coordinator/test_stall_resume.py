"""A member stalled past its ZooKeeper session must not start handlers when it resumes.

Found by the chaos runs (issue 14): the documented exception is a handler that was *running*
when the member stalled (SIGSTOP, a GC pause) and finishes after its session expired. But on
SIGCONT the member's workers went on with the next queued records at once, before kazoo had
told it the session was gone: it ran records it no longer owned, often ones the new owner had
already finished. The session gate now allows starting a handler only within half a session
timeout of the last successful ZooKeeper round trip (the lease-time rule), so a stalled member
resumes with dispatch closed until it knows.

Minimal case, exclusive mode: the active member A has a backlog (slow handlers, 2 workers); it is
SIGSTOPped past ``--session-timeout``, the standby B takes over; A is SIGCONTed. No handler may
start in A between the SIGCONT and the moment A logs that its session expired.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.kafka.support.journal import (
    kill_all,
    produce,
    read_journal,
    sequenced,
    start_consumer,
    wait_for,
)

pytestmark = pytest.mark.slow

SESSION_TIMEOUT = 4.0


def _member(
    name: str, bootstrap: str, zookeeper: str, group: str, topic: str, tmp: Path
) -> subprocess.Popen[bytes]:
    return start_consumer(
        bootstrap, group, topic, tmp / "journal", workers=2, sleep_ms="150,250",
        args=["--mode", "exclusive", "--poison", "block", "--zookeeper", zookeeper,
              "--session-timeout", str(SESSION_TIMEOUT), "--commit-interval", "0.2",
              "-X", f"client.id={name}"],
        log=tmp / f"{name}.log",
    )  # fmt: skip


def test_a_member_resuming_after_its_session_expired_starts_no_handler(
    kafka_bootstrap: str,
    zookeeper_hosts: str,
    new_topic: object,
    new_group: object,
    tmp_path: Path,
) -> None:
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("stall-resume")  # type: ignore[operator]
    journal = tmp_path / "journal"
    keys: list[bytes | None] = [f"k{i:02d}".encode() for i in range(20)]
    produce(kafka_bootstrap, topic, sequenced(keys, 10))
    a = _member("A", kafka_bootstrap, zookeeper_hosts, group, topic, tmp_path)
    procs = [a]
    try:
        wait_for(lambda: any(e.pid == a.pid for e in read_journal(journal)), 60, "A to process")
        procs.append(_member("B", kafka_bootstrap, zookeeper_hosts, group, topic, tmp_path))
        wait_for(lambda: "is a standby" in (tmp_path / "B.log").read_text(), 60, "B to stand by")
        os.kill(a.pid, signal.SIGSTOP)
        time.sleep(SESSION_TIMEOUT + 3)  # the stall itself: past the session timeout
        b_pid = procs[1].pid
        wait_for(lambda: any(e.pid == b_pid for e in read_journal(journal)), 30, "B to take over")
        resumed = time.monotonic_ns()
        os.kill(a.pid, signal.SIGCONT)
        wait_for(
            lambda: "ZooKeeper session expired" in (tmp_path / "A.log").read_text(),
            30, "A to notice that its session expired",
        )  # fmt: skip
        noticed = time.monotonic_ns()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
        kill_all(procs)
    late = [e for e in read_journal(journal) if e.pid == a.pid and e.kind == "S" and e.t >= resumed]
    started_before_noticing = [e for e in late if e.t <= noticed]
    assert not started_before_noticing, (
        f"A started {len(started_before_noticing)} handler(s) after its SIGCONT, before it "
        f"noticed its session had expired (B was active by then): {started_before_noticing[:3]}"
    )
