"""``exclusive`` mode with the coordinator (issue 12): three ``keyshared run`` processes, one
active at a time, standbys take over after ``kill -9`` of the active one.

The merged handler journals prove that at no instant did two members process, that nothing was
lost, that per-key order held across the failover, and that the duplicates are only records the
killed member had in flight or had finished after its last commit.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from coordinator import ZooKeeperCoordinator
from keyshared.cli import cli
from tests.coordinator.conftest import NAMESPACE, WAIT_S, expire_session
from tests.coordinator.members import StartMember
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.journal import (
    Event,
    check,
    count_finished,
    kill_all,
    produce,
    read_journal,
    sequenced,
    start_consumer,
    terminate,
    wait_for,
)

pytestmark = pytest.mark.slow

SESSION_TIMEOUT = 4.0
COMMIT_INTERVAL = 0.2


def start_member(
    name: str, bootstrap: str, zookeeper: str, group: str, topic: str, tmp: Path
) -> subprocess.Popen[bytes]:
    """An exclusive-mode member journaling into ``tmp/journal``; ``-X client.id`` names it."""
    return start_consumer(
        bootstrap, group, topic, tmp / "journal", workers=4, sleep_ms="5,15",
        args=["--mode", "exclusive", "--poison", "block", "--zookeeper", zookeeper,
              "--session-timeout", str(SESSION_TIMEOUT), "--commit-interval", str(COMMIT_INTERVAL),
              "-X", f"client.id={name}"],
        log=tmp / f"{name}.log",
    )  # fmt: skip


def contenders(zk: ZooKeeperCoordinator, group: str) -> list[str]:
    """The active member first, then the standbys in the order they will take over."""
    from kazoo.recipe.lock import Lock

    return [str(c) for c in Lock(zk.client, zk.layout(group).active).contenders()]


def overlaps(events: list[Event], killed: dict[int, int]) -> list[str]:
    """Starts of one member while another member had a call open (a killed member's open
    calls end at its kill; one it journaled a moment after the kill time was taken, before
    the signal landed, ends at its own start, as in ``journal.check``)."""
    timeline = sorted(events, key=lambda e: (e.t, e.kind == "S"))
    open_calls: dict[int, set[tuple[bytes | None, int]]] = {}
    closing = sorted((t, pid) for pid, t in killed.items())
    found = []
    for event in timeline:
        while closing and closing[0][0] <= event.t:
            open_calls.pop(closing.pop(0)[1], None)
        calls = open_calls.setdefault(event.pid, set())
        if event.kind == "S":
            others = [pid for pid, c in open_calls.items() if c and pid != event.pid]
            if others:
                found.append(f"{event} started while {others} were processing")
            if event.pid in killed and killed[event.pid] <= event.t:
                continue  # started as it was being killed: never open after its own start
            calls.add((event.key, event.seq))
        else:
            calls.discard((event.key, event.seq))
    return found


def test_one_active_member_and_failover_after_kill_9(
    kafka_bootstrap: str,
    zookeeper_hosts: str,
    zk: ZooKeeperCoordinator,
    new_topic: object,
    new_group: object,
    tmp_path: Path,
) -> None:
    topic = new_topic(3)  # type: ignore[operator]
    group = new_group("exclusive")  # type: ignore[operator]
    journal = tmp_path / "journal"
    keys: list[bytes | None] = [f"key-{i:02d}".encode() for i in range(30)]
    procs = {
        name: start_member(name, kafka_bootstrap, zookeeper_hosts, group, topic, tmp_path)
        for name in ("E1", "E2", "E3")
    }
    killed: dict[int, int] = {}
    try:
        wait_for(lambda: len(contenders(zk, group)) == 3, 60, "three contenders")
        first = contenders(zk, group)[0]
        assert zk.status(group).active == first
        produce(kafka_bootstrap, topic, sequenced(keys, 20))
        wait_for(lambda: count_finished(journal) >= 150, 60, "the active member to process")
        victim = procs.pop(first)
        killed[victim.pid] = time.monotonic_ns()
        victim.kill()
        victim.wait(10)
        wait_for(lambda: count_finished(journal) >= 600, 90, "a standby to finish the rest")
        successor = contenders(zk, group)[0]
        assert successor != first and set(contenders(zk, group)) == set(procs)
        standby = next(n for n in procs if n != successor)
        shown = CliRunner().invoke(
            cli,
            ["status", "-b", kafka_bootstrap, "-g", group, "-t", topic, "--json",
             "--zookeeper", zookeeper_hosts],
        )  # fmt: skip
        assert shown.exit_code == 0, shown.output
        view = json.loads(shown.output)["coordinator"]
        assert (view["active"], view["standbys"]) == (successor, [standby]), view
        started = time.monotonic()
        assert terminate(procs.pop(standby)) == 0  # a waiting standby stops at once
        assert time.monotonic() - started < 10
        assert terminate(procs.pop(successor)) == 0
    finally:
        kill_all(procs.values())

    events = read_journal(journal)
    report = check(events, dict.fromkeys(keys, 20), killed=killed)
    assert not report.missing and not report.violations, report.summary()
    assert not overlaps(events, killed), overlaps(events, killed)[:5]
    kill_t = next(iter(killed.values()))
    victim_pid = next(iter(killed))
    assert {e.pid for e in events} == {victim_pid, _pid_of(events, kill_t, victim_pid)}
    takeover = min(e.t for e in events if e.t > kill_t and e.kind == "S" and e.pid != victim_pid)
    failover = (takeover - kill_t) / 1e9
    assert failover < 3 * SESSION_TIMEOUT, f"failover took {failover:.1f} s"
    # Duplicates: only records the victim had running at the kill, or finished after its last
    # commit (at most one commit interval, plus a commit's round trip, before the kill).
    last_commit_window = int((COMMIT_INTERVAL + 1.0) * 1e9)
    recent = {
        (e.key, e.seq)
        for e in events
        if e.pid == victim_pid and e.kind == "S" and e.t >= kill_t - last_commit_window
    }
    unexpected = [d for d in report.duplicate_ids if d not in recent]
    assert not unexpected, f"duplicates the victim had finished long before: {unexpected[:5]}"


def _pid_of(events: list[Event], after: int, victim: int) -> int:
    """The pid that processed after the kill (the successor). The victim's own lines may
    follow the kill's timestamp: it is taken just before the SIGKILL is sent."""
    return next(e.pid for e in sorted(events, key=lambda e: e.t) if e.t > after and e.pid != victim)


def test_an_expired_active_member_is_fenced_and_stands_by_again(
    start: StartMember,
    kafka_bootstrap: str,
    zookeeper_hosts: str,
    new_topic: object,
    new_group: object,
) -> None:
    """Session expiry of the active member: the standby takes over from the committed offset,
    the expired member commits nothing more and contends again as a standby."""
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("ex-expiry")  # type: ignore[operator]
    keys: list[bytes | None] = [f"x{i}".encode() for i in range(5)]
    produce(kafka_bootstrap, topic, sequenced(keys, 10))
    a_journal, b_journal = Recorder(pid=1), Recorder(pid=2)
    options = {"mode": "exclusive", "poison": "block", "session_timeout": 4.0}
    a = start(group, topic, a_journal, member="A", **options)
    with ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE) as zk:
        wait_until(lambda: a_journal.finished() == 50, "A to process the first records", WAIT_S)
        b = start(group, topic, b_journal, member="B", **options)
        wait_until(lambda: contenders(zk, group) == ["A", "B"], "B to stand by", WAIT_S)

        expire_session(a.zk.client, zookeeper_hosts)  # type: ignore[attr-defined]
        wait_until(lambda: contenders(zk, group) == ["B", "A"], "B active, A standby", WAIT_S)
        produce(kafka_bootstrap, topic, [(k, s) for k in keys for s in range(11, 21)])
        wait_until(lambda: b_journal.finished() >= 50, "B to process the rest", WAIT_S * 2)
    stopping = time.monotonic()
    a.stop()  # a standby: stops at once
    assert time.monotonic() - stopping < 5, "stopping a standby took too long"
    b.stop()
    events = a_journal.snapshot() + b_journal.snapshot()
    report = check(events, dict.fromkeys(keys, 20))
    assert not report.missing and not report.violations, report.summary()
    assert not overlaps(events, {}), overlaps(events, {})[:5]
    assert {e.seq for e in a_journal.snapshot()} <= set(range(1, 11)), "A ran after its expiry"
    assert report.duplicates == 0, report.summary()  # A committed everything it finished
