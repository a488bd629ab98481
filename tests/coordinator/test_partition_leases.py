"""``partition`` mode with partition leases (issue 12), members as ``keyshared run`` processes.

One key's handler sleeps far past ``--drain-timeout``. When a second member joins, the group
(eager ``range`` assignor: everything is revoked, then partition 1 goes to the second member)
moves that key's partition while its record still runs: the old owner's drain times out.
Without leases the new owner would start the partition from the committed offset, which is
below the running record, and run it again while it still runs. With leases the new owner
waits until the old owner's stragglers finished and it released the lease. The handlers' own
journals (one monotonic clock for both processes) must show no overlap at all.
"""

from __future__ import annotations

import subprocess
import zlib
from pathlib import Path

import pytest

from coordinator import ZooKeeperCoordinator
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

SLOW_KEY = b"slow-0"  # lands on partition 1 (librdkafka's default partitioner: CRC-32 % 2)
SLOW_SECONDS = "8"
DRAIN_TIMEOUT = "1"


def _holders(zk: ZooKeeperCoordinator, group: str) -> list[str]:
    """The member of every granted partition lease of the group."""
    return [lease.member_id for lease in zk.status(group).partition_leases if lease.held]


def _queued(zk: ZooKeeperCoordinator, group: str, member: str) -> bool:
    """Whether ``member`` waits in a lease queue behind another member's lease."""
    return any(
        lease.member_id == member and not lease.held for lease in zk.status(group).partition_leases
    )


def test_a_timed_out_drain_keeps_the_lease_until_the_stragglers_finish(
    kafka_bootstrap: str,
    zookeeper_hosts: str,
    zk: ZooKeeperCoordinator,
    new_topic: object,
    new_group: object,
    tmp_path: Path,
) -> None:
    assert zlib.crc32(SLOW_KEY) % 2 == 1
    topic = new_topic(2)  # type: ignore[operator]
    group = new_group("leases")  # type: ignore[operator]
    journal = tmp_path / "journal"
    keys: list[bytes | None] = [SLOW_KEY, *(f"key-{i}".encode() for i in range(10))]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    pids: dict[str, int] = {}

    def start(name: str) -> None:
        procs[name] = start_consumer(
            kafka_bootstrap, group, topic, journal, workers=8, sleep_ms="5,20",
            env={"KS_SLOW_KEY": SLOW_KEY.decode(), "KS_SLOW_SECONDS": SLOW_SECONDS},
            args=["--zookeeper", zookeeper_hosts, "--session-timeout", "4",
                  "--drain-timeout", DRAIN_TIMEOUT, "--commit-interval", "0.2",
                  "-X", "partition.assignment.strategy=range", "-X", f"client.id={name}"],
            log=tmp_path / f"{name}.log",
        )  # fmt: skip
        pids[name] = procs[name].pid

    try:
        start("A")
        wait_for(lambda: _holders(zk, group) == ["A", "A"], 60, "A to hold both leases")
        start("B")  # its start-up takes seconds: the slow record is running when it joins
        produce(kafka_bootstrap, topic, sequenced(keys, 2))
        wait_for(lambda: _queued(zk, group, "B"), 60, "B to wait for A's lease")
        wait_for(lambda: count_finished(journal) >= 22, 120, "every record to be processed")
        for name in ("B", "A"):
            code = terminate(procs.pop(name))
            assert code == 0, (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:]
    finally:
        kill_all(procs.values())
    a_log = (tmp_path / "A.log").read_text(errors="replace")
    b_log = (tmp_path / "B.log").read_text(errors="replace")
    assert "drain of" in a_log and "timed out" in a_log, "the drain never timed out:\n" + a_log
    assert "the lease is kept until they finish" in a_log, a_log[-3000:]
    assert "[1]: assigned; waiting for its lease" in b_log, b_log[-3000:]

    events = read_journal(journal)
    report = check(events, dict.fromkeys(keys, 2))
    assert not report.missing and not report.violations, report.summary()
    slow = [e for e in events if e.key == SLOW_KEY]
    assert {e.partition for e in slow} == {1}
    a_slow_end = _only(slow, "E", pids["A"], seq=1).t
    b_first = min(e.t for e in events if e.pid == pids["B"] and e.partition == 1)
    assert b_first > a_slow_end, "B started partition 1 while A's straggler still ran"
    # The straggler was committed as not done, so B redid it: that one duplicate only.
    assert _only(slow, "S", pids["B"], seq=1).t > a_slow_end
    assert report.duplicate_ids == [(SLOW_KEY, 1)], report.summary()


def _only(events: list[Event], kind: str, pid: int, *, seq: int) -> Event:
    found = [e for e in events if e.kind == kind and e.pid == pid and e.seq == seq]
    assert len(found) == 1, f"expected one {kind} of seq {seq} by {pid}, got {found}"
    return found[0]


def test_an_expired_session_fences_and_the_partition_resumes_from_the_committed_offset(
    start: StartMember,
    kafka_bootstrap: str,
    zookeeper_hosts: str,
    new_topic: object,
    new_group: object,
) -> None:
    """Session expiry: every partition is dropped without a commit and its lease is gone; the
    renewed session queues for the leases of the partitions the group still assigns here, and
    processing resumes from the committed offset with nothing lost and order kept."""
    topic = new_topic(2)  # type: ignore[operator]
    group = new_group("pl-expiry")  # type: ignore[operator]
    keys: list[bytes | None] = [f"p{i}".encode() for i in range(10)]
    produce(kafka_bootstrap, topic, sequenced(keys, 10))
    journal = Recorder(pid=1)
    member = start(group, topic, journal, member="A", mode="partition", session_timeout=4.0)
    with ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE) as zk:
        wait_until(lambda: journal.finished() == 100, "the first records", WAIT_S)
        before = {lease.token for lease in zk.status(group).partition_leases}
        assert len(before) == 2
        # Nothing runs now (all 100 finished, nothing else is in the topic). What the member
        # finished but had not committed yet is redone after the expiry: a second life of the
        # same process, journalled under its own id so the judge reads a redo as a redo (seq 4
        # again after seq 10 in one life would be a reorder; across lives it is the guarantee).
        journal.pid = 2
        expire_session(member.zk.client, zookeeper_hosts)  # type: ignore[attr-defined]
        wait_until(
            lambda: (
                len([x for x in zk.status(group).partition_leases if x.held]) == 2
                and not before & {x.token for x in zk.status(group).partition_leases}
            ),
            "both leases taken again in the new session",
            WAIT_S,
        )
        produce(kafka_bootstrap, topic, [(k, s) for k in keys for s in range(11, 21)])
        wait_until(lambda: journal.finished() == 200, "the records after the expiry", WAIT_S)
    member.stop()
    events = journal.snapshot()
    report = check(events, dict.fromkeys(keys, 20))
    assert not report.missing and not report.violations, report.summary()
    # The second life resumed each key where the first life's commits left it: what it redid
    # is a run of each key's records before the expiry, ending at its last one (seq 10).
    for key in keys:
        redone = sorted(
            e.seq for e in events if e.kind == "S" and e.pid == 2 and e.key == key and e.seq <= 10
        )
        assert not redone or redone == list(range(redone[0], 11)), (key, redone)
