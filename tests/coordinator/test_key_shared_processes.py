"""``key_shared`` with members as separate ``keyshared run`` processes (issue 11).

More members than partitions share one partition by key; members join, leave (SIGTERM) and
crash (SIGKILL) while records flow; an operator moves a range with ``keyshared assign``. The
merged journals of the handlers prove completeness, per-key order across hand-overs, and that
duplicates only follow a crash.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from coordinator import ZooKeeperCoordinator
from keyshared.core.slots import MAX_SLOT
from tests.kafka.support.journal import (
    Event,
    check,
    count_finished,
    keyshared_command,
    kill_all,
    produce,
    read_journal,
    sequenced,
    start_consumer,
    terminate,
    wait_for,
)

pytestmark = pytest.mark.slow

SESSION_TIMEOUT = "10"  # a loaded 2-core machine can starve a member for seconds


class Group:
    """Member processes of one key_shared group, journaling into one file."""

    def __init__(
        self, bootstrap: str, zookeeper: str, group: str, topic: str, tmp: Path, sleep_ms: str
    ) -> None:
        self.bootstrap, self.zookeeper, self.group, self.topic = bootstrap, zookeeper, group, topic
        self.tmp, self.sleep_ms = tmp, sleep_ms
        self.journal = tmp / "journal"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: dict[int, int] = {}

    def start(self, name: str) -> None:
        args = [
            "--mode", "key_shared", "--zookeeper", self.zookeeper,
            "--session-timeout", SESSION_TIMEOUT, "--commit-interval", "0.2",
            "-X", f"client.id={name}",
        ]  # fmt: skip
        self.procs[name] = start_consumer(
            self.bootstrap, self.group, self.topic, self.journal, workers=8,
            sleep_ms=self.sleep_ms, args=args, log=self.tmp / f"{name}.log",
        )  # fmt: skip

    def stop(self, name: str) -> None:
        code = terminate(self.procs.pop(name))
        log = (self.tmp / f"{name}.log").read_text(errors="replace")[-3000:]
        assert code == 0, f"{name} exited {code} after SIGTERM:\n{log}"

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        self.killed[proc.pid] = time.monotonic_ns()
        proc.kill()
        proc.wait(10)

    def finished(self) -> int:
        return count_finished(self.journal)

    def close(self) -> None:
        kill_all(self.procs.values())


MakeGroup = Callable[[str, str], Group]


@pytest.fixture
def make_group(
    kafka_bootstrap: str, zookeeper_hosts: str, new_topic: Any, new_group: Any, tmp_path: Path
) -> Iterator[MakeGroup]:
    """``make_group(prefix, sleep_ms)``: a group of member processes on a fresh 1-partition
    topic; every process still running is killed at the end."""
    made: list[Group] = []

    def make(prefix: str, sleep_ms: str) -> Group:
        group = Group(
            kafka_bootstrap, zookeeper_hosts, new_group(prefix), new_topic(1), tmp_path, sleep_ms
        )
        made.append(group)
        return group

    yield make
    for group in made:
        group.close()


def balanced(zk: ZooKeeperCoordinator, group: str, members: set[str]) -> bool:
    """Every range is owned by one of ``members``, each holds its lease, and all take part."""
    status = zk.status(group)
    ranges = status.ranges
    owners = {r.owner for r in ranges}
    return owners == members and all(r.lease_holders == (r.owner,) for r in ranges)


def held_by(zk: ZooKeeperCoordinator, group: str, slots: object, member: str) -> bool:
    """Whether ``member`` owns every slot of ``slots`` by the plan and holds the leases."""
    overlapping = [r for r in zk.status(group).ranges if r.slots.overlaps(slots)]  # type: ignore[arg-type]
    return bool(overlapping) and all(
        r.owner == member and r.lease_holders == (member,) for r in overlapping
    )


def first_finishers(events: list[Event]) -> dict[tuple[bytes | None, int], int]:
    first: dict[tuple[bytes | None, int], int] = {}
    for event in sorted(events, key=lambda e: e.t):
        if event.kind == "E":
            first.setdefault((event.key, event.seq), event.pid)
    return first


def test_four_members_share_one_partition_by_key(
    kafka_bootstrap: str, zookeeper_hosts: str, zk: ZooKeeperCoordinator, make_group: MakeGroup
) -> None:
    g = make_group("ks4", "0,1")
    topic = g.topic
    keys: list[bytes | None] = [f"key-{i:04d}".encode() for i in range(1000)]
    try:
        for name in ("M0", "M1", "M2", "M3"):
            g.start(name)
        wait_for(lambda: balanced(zk, g.group, {"M0", "M1", "M2", "M3"}), 60, "4 members")
        produce(kafka_bootstrap, topic, sequenced(keys, 20))
        wait_for(lambda: g.finished() >= 20_000, 180, "20k records to be processed")
        status = zk.status(g.group)
        status_command = [*keyshared_command(), "status", "-b", kafka_bootstrap, "-g", g.group,
                          "--zookeeper", zookeeper_hosts, "--json"]  # fmt: skip
        shown = wait_for(  # Kafka knows the group once the leader committed its low watermark
            lambda: (done := subprocess.run(status_command, capture_output=True, text=True,
                                             timeout=60)).returncode == 0 and done,
            30, "keyshared status to know the group",
        )  # fmt: skip
        view = json.loads(shown.stdout)["coordinator"]["key_shared"]  # type: ignore[attr-defined]
        for name in list(g.procs):
            g.stop(name)
    finally:
        g.close()
    events = read_journal(g.journal)
    report = check(events, dict.fromkeys(keys, 20))
    assert not report.missing and not report.violations, report.summary()
    assert report.duplicates == 0, f"duplicates without a crash: {report.duplicate_ids[:5]}"
    keys_by_pid: dict[int, set[bytes | None]] = {}
    for event in events:
        keys_by_pid.setdefault(event.pid, set()).add(event.key)
    shares = sorted(len(k) for k in keys_by_pid.values())
    assert len(shares) == 4 and all(150 <= n <= 350 for n in shares), f"keys per member {shares}"
    assert sorted(status.members) == ["M0", "M1", "M2", "M3"]
    assert sorted(view["members"]) == ["M0", "M1", "M2", "M3"]
    shown_ranges = sorted(
        (int(r["slots"].split("-")[0]), int(r["slots"].split("-")[1])) for r in view["ranges"]
    )
    assert shown_ranges[0][0] == 0 and shown_ranges[-1][1] == MAX_SLOT
    assert all(a[1] + 1 == b[0] for a, b in pairwise(shown_ranges)), shown_ranges
    assert {r["owner"] for r in view["ranges"]} == {"M0", "M1", "M2", "M3"}
    assert not any(r["draining"] for r in view["ranges"])
    covered = sorted((r.slots.lo, r.slots.hi) for r in status.ranges)
    assert covered[0][0] == 0 and covered[-1][1] == MAX_SLOT
    assert all(a[1] + 1 == b[0] for a, b in pairwise(covered)), covered


def test_members_join_leave_and_crash_without_loss_or_overtakes(
    kafka_bootstrap: str, zookeeper_hosts: str, zk: ZooKeeperCoordinator, make_group: MakeGroup
) -> None:
    g = make_group("ksjl", "1,3")
    topic = g.topic
    keys: list[bytes | None] = [f"key-{i:04d}".encode() for i in range(1000)]
    total = 1000 * 16
    produce(kafka_bootstrap, topic, sequenced(keys, 16))
    try:
        g.start("A")
        g.start("B")
        wait_for(lambda: g.finished() >= total * 0.2, 120, "20%")
        g.start("C")
        wait_for(lambda: g.finished() >= total * 0.4, 120, "40%")
        g.stop("A")  # graceful: drains, writes cursors, releases its leases
        wait_for(lambda: g.finished() >= total * 0.6, 120, "60%")
        g.kill("B")  # crash: its ranges move when its session expires
        wait_for(lambda: g.finished() >= total * 0.75, 120, "75%")
        g.start("D")
        wait_for(lambda: g.finished() >= total, 180, "every record")
    finally:
        for name in list(g.procs):
            g.stop(name)
        g.close()
    events = read_journal(g.journal)
    report = check(events, dict.fromkeys(keys, 16), killed=g.killed)
    assert not report.missing and not report.violations, report.summary()
    firsts = first_finishers(events)
    redone_after_other = [rid for rid in report.duplicate_ids if firsts[rid] not in g.killed]
    assert not redone_after_other, f"duplicates not caused by the crash: {redone_after_other[:5]}"
    print(f"duplicates after the kill -9: {report.duplicates} of {total}")


def test_keyshared_assign_moves_a_range_under_load_with_a_drain(
    kafka_bootstrap: str, zookeeper_hosts: str, zk: ZooKeeperCoordinator, make_group: MakeGroup
) -> None:
    g = make_group("ksmv", "1,4")
    topic = g.topic
    keys: list[bytes | None] = [f"key-{i:04d}".encode() for i in range(500)]
    total = 500 * 20
    try:
        g.start("A")
        g.start("B")
        wait_for(lambda: balanced(zk, g.group, {"A", "B"}), 60, "2 members")
        produce(kafka_bootstrap, topic, sequenced(keys, 20))
        wait_for(lambda: g.finished() >= total * 0.2, 120, "20%")
        owned_by_a = [r.slots for r in zk.status(g.group).ranges if r.owner == "A"]
        moving = f"{owned_by_a[0].lo}-{owned_by_a[0].hi}"
        assign = [*keyshared_command(), "assign", "-g", g.group, "--range", moving,
                  "-z", zookeeper_hosts]  # fmt: skip
        subprocess.run([*assign, "-m", "B"], check=True, capture_output=True, timeout=60)
        wait_for(lambda: held_by(zk, g.group, owned_by_a[0], "B"), 60, "the range to move to B")
        wait_for(lambda: g.finished() >= total, 180, "every record")
        subprocess.run([*assign, "--release"], check=True, capture_output=True, timeout=60)
        for name in list(g.procs):
            g.stop(name)
    finally:
        g.close()
    events = read_journal(g.journal)
    report = check(events, dict.fromkeys(keys, 20))
    assert not report.missing and not report.violations, report.summary()
    assert report.duplicates == 0, f"a planned move redid records: {report.duplicate_ids[:5]}"
