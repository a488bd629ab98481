"""Restart after a crash (SIGKILL of a consumer process): nothing lost, little redone (issue 4).

The commit carries the safe cursor and, as metadata, the offsets finished above it. After a
kill -9 the next member starts from the cursor and skips what the metadata says is finished, so
only records that were in flight at the kill (or finished after the last commit) run again.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from keyshared.core.offsets import decode_finished
from tests.kafka.support.journal import (
    ASYNC_HANDLER,
    BATCH_HANDLER,
    HANDLER,
    check,
    committed,
    count_finished,
    high_watermarks,
    kill_all,
    produce,
    read_journal,
    sequenced,
    start_consumer,
    terminate,
    wait_committed_to_end,
    wait_for,
)

# Detect the killed member in seconds, not the default 45.
FAST_FAILURE = ["-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=1000"]


def _kill(proc: subprocess.Popen[bytes]) -> int:
    killed_at = time.monotonic_ns()
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    return killed_at


def test_restart_after_kill_redoes_only_what_was_in_flight(
    kafka_bootstrap: str, new_topic, new_group, tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    group = new_group("crash")
    stuck = b"stuck"
    others = [f"key-{i:03d}".encode() for i in range(100)]
    # The stuck key's first record comes first, so it holds its partition's cursor at the start
    # while everything else there finishes above it and must be carried by the metadata.
    records: list[tuple[bytes | None, int]] = [(stuck, 1)]
    for seq in range(1, 21):
        records += [(key, seq) for key in others]
        if seq <= 9:
            records.append((stuck, seq + 1))
    produce(kafka_bootstrap, topic, records)
    expected = {**{key: 20 for key in others}, stuck: 10}
    ends = high_watermarks(kafka_bootstrap, topic)

    journal = tmp_path / "journal"
    first = start_consumer(
        kafka_bootstrap,
        group,
        topic,
        journal,
        env={"KS_STUCK_KEY": stuck.decode()},
        args=FAST_FAILURE,
        log=tmp_path / "first.log",
        # async: the stuck call holds its key and the cursor, and nothing else (a thread
        # worker would also hold the keys queued behind it on that thread)
        handler=ASYNC_HANDLER,
    )
    second = None
    try:
        wait_for(lambda: count_finished(journal) >= 2000, 60, "every record but the stuck key's")
        events = read_journal(journal)
        stuck_partition = next(e.partition for e in events if e.key == stuck)
        done_there = {e.offset for e in events if e.kind == "E" and e.partition == stuck_partition}
        stuck_offset = next(e.offset for e in events if e.key == stuck and e.kind == "S")

        def metadata_carries_everything() -> bool:
            offsets = committed(kafka_bootstrap, group, topic)
            offset, metadata = offsets[stuck_partition]
            others_at_end = all(
                offsets[p][0] == end for p, end in ends.items() if p != stuck_partition
            )
            return (
                offset == stuck_offset
                and done_there <= decode_finished(offset, metadata)
                and others_at_end
            )

        wait_for(metadata_carries_everything, 15, "a commit carrying every finished offset")
        killed_at = _kill(first)

        second = start_consumer(
            kafka_bootstrap, group, topic, journal, args=FAST_FAILURE, log=tmp_path / "second.log"
        )
        wait_for(lambda: count_finished(journal) >= 2010, 60, "the stuck key's records")
        assert terminate(second) == 0
    finally:
        kill_all([p for p in (first, second) if p is not None])

    events = read_journal(journal)
    report = check(events, expected, killed={first.pid: killed_at})
    assert not report.missing and not report.violations, report.summary()
    by_first = {(e.key, e.seq) for e in events if e.pid == first.pid and e.kind == "S"}
    finished_by_first = {(e.key, e.seq) for e in events if e.pid == first.pid and e.kind == "E"}
    in_flight_at_kill = by_first - finished_by_first
    by_second = {(e.key, e.seq) for e in events if second is not None and e.pid == second.pid}
    redone = by_second & finished_by_first
    print(
        f"finished before the kill: {len(finished_by_first)}, in flight at the kill: "
        f"{len(in_flight_at_kill)}, redone after the restart: {len(redone)}"
    )
    assert in_flight_at_kill == {(stuck, 1)}
    assert not redone, f"finished before the crash but processed again: {sorted(redone)[:10]}"
    # The second member processed exactly the stuck key: its in-flight record and its tail.
    assert by_second == {(stuck, seq) for seq in range(1, 11)}
    wait_committed_to_end(kafka_bootstrap, group, topic)


@pytest.mark.slow
@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_kill_under_load_loses_nothing_and_keeps_order(
    kafka_bootstrap: str, new_topic, new_group, tmp_path: Path, batch: bool
) -> None:
    """kill -9 of a member under load; with ``batch``, batch handlers (up to 10 records a
    call, one sleep per call), so whole batches are in flight at the kill."""
    topic = new_topic(partitions=4)
    group = new_group("crash-load")
    keys = [f"key-{i:03d}".encode() for i in range(400)]
    produce(kafka_bootstrap, topic, sequenced(keys, 30))
    total = 400 * 30
    journal = tmp_path / "journal"
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str) -> None:
        procs[name] = start_consumer(
            kafka_bootstrap,
            group,
            topic,
            journal,
            workers=4,
            sleep_ms="40,80" if batch else "5,15",
            args=[*FAST_FAILURE, "--batch-size", "10"] if batch else FAST_FAILURE,
            log=tmp_path / f"{name}.log",
            handler=BATCH_HANDLER if batch else HANDLER,
        )

    def finished_by(name: str) -> int:
        pid = procs[name].pid
        return sum(1 for e in read_journal(journal) if e.pid == pid and e.kind == "E")

    try:
        start("A")
        wait_for(lambda: finished_by("A") >= 0.1 * total, 60, "A to process 10%")
        start("B")
        # The group has settled with A and B both working: A has partitions and commits.
        wait_for(lambda: finished_by("B") >= 0.1 * total, 60, "B to process 10%")
        killed_at = _kill(procs["A"])
        at_kill = count_finished(journal)
        start("C")
        wait_for(lambda: count_finished(journal) >= total, 120, "every record")
        assert terminate(procs["B"]) == 0
        assert terminate(procs["C"]) == 0
    finally:
        kill_all(procs.values())

    victim = procs["A"].pid
    events = read_journal(journal)
    report = check(events, {key: 30 for key in keys}, killed={victim: killed_at})
    assert at_kill < total, "everything was finished before the kill"
    assert not report.missing, report.summary()
    assert not report.violations, report.summary()

    started = {(e.key, e.seq) for e in events if e.pid == victim and e.kind == "S"}
    end_times = {(e.key, e.seq): e.t for e in events if e.pid == victim and e.kind == "E"}
    in_flight = started - end_times.keys()
    redone = {
        (e.key, e.seq) for e in events if e.pid != victim and e.kind == "S"
    } & end_times.keys()
    # Commits go out every second (asynchronously): what finished since the last one may be
    # redone, and what was in flight is. Anything older must have been committed.
    recent = {rid for rid, t in end_times.items() if t > killed_at - 2_500_000_000}
    too_old = redone - recent
    print(
        f"killed at {at_kill}/{total} finished; in flight at the kill: {len(in_flight)}; "
        f"finished by the victim in its last 2.5 s: {len(recent)}; redone: {len(redone)} "
        f"(+{len(in_flight)} restarted); duplicates overall: {report.duplicates}"
    )
    assert len(end_times) > len(recent), "the victim finished nothing long before its kill"
    assert not too_old, (
        f"{len(too_old)} records finished more than 2.5 s before the kill were redone, "
        f"e.g. {sorted(too_old)[:5]}"
    )
    wait_committed_to_end(kafka_bootstrap, group, topic)
