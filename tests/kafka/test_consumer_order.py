"""Per-key order and completeness across members joining and leaving (issue 4).

Consumers are separate ``keyshared run`` processes running the journaling handler; the merged
journals are checked for every record finished, per-key order across processes, and duplicates.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from pathlib import Path

import pytest

import keyshared
from tests.kafka.support.journal import (
    BATCH_HANDLER,
    HANDLER,
    check,
    count_finished,
    kill_all,
    produce,
    read_journal,
    sequenced,
    start_consumer,
    terminate,
    wait_committed_to_end,
    wait_for,
)

KEYS = 600
PER_KEY = 40
PARTITIONS = 4


@pytest.mark.slow
def test_order_and_completeness_while_members_join_and_leave(
    kafka_bootstrap: str, new_topic, new_group, tmp_path: Path
) -> None:
    """Cooperative-sticky (the default): 24k records, 600 keys, 4 partitions, 4 members."""
    keys = [f"key-{i:04d}".encode() for i in range(KEYS)]
    topic = new_topic(partitions=PARTITIONS)
    _join_and_leave(kafka_bootstrap, topic, new_group("order"), tmp_path, keys, PER_KEY, [])


@pytest.mark.slow
def test_order_and_completeness_with_the_eager_protocol(
    kafka_bootstrap: str, new_topic, new_group, tmp_path: Path
) -> None:
    """Eager (range): every rebalance revokes every partition, so every change is a hand-over."""
    keys = [f"key-{i:03d}".encode() for i in range(300)]
    topic = new_topic(partitions=PARTITIONS)
    args = ["-X", "partition.assignment.strategy=range"]
    _join_and_leave(kafka_bootstrap, topic, new_group("eager"), tmp_path, keys, 30, args)


@pytest.mark.slow
def test_batch_handler_keeps_order_while_members_join_and_leave(
    kafka_bootstrap: str, new_topic, new_group, tmp_path: Path
) -> None:
    """Batches of up to 10 (``--batch-size``), eager hand-overs: a batch in flight at a revoke
    is drained like single records, and no key is ever run by two members at once."""
    keys = [f"key-{i:03d}".encode() for i in range(300)]
    topic = new_topic(partitions=PARTITIONS)
    args = ["-X", "partition.assignment.strategy=range", "--batch-size", "10"]
    _join_and_leave(
        kafka_bootstrap, topic, new_group("batch-order"), tmp_path, keys, 30, args,
        handler=BATCH_HANDLER, sleep_ms="40,80",
    )  # fmt: skip


def _join_and_leave(
    bootstrap: str,
    topic: str,
    group: str,
    tmp_path: Path,
    keys: list[bytes],
    per_key: int,
    args: list[str],
    *,
    handler: str = HANDLER,
    sleep_ms: str = "2,8",
) -> None:
    """A and B start, C joins, A leaves (SIGTERM), D joins, C leaves; then check the journal."""
    total = len(keys) * per_key
    per_partition = produce(bootstrap, topic, sequenced(keys, per_key))
    assert sum(per_partition.values()) == total and len(per_partition) == PARTITIONS

    journal = tmp_path / "journal"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = {name: tmp_path / f"{name}.log" for name in "ABCD"}
    progress_at: dict[str, int] = {}

    def start(name: str) -> None:
        procs[name] = start_consumer(
            bootstrap, group, topic, journal, workers=4, sleep_ms=sleep_ms, args=args,
            log=logs[name], handler=handler,
        )  # fmt: skip

    def reach(fraction: float, event: str) -> None:
        wait_for(lambda: count_finished(journal) >= fraction * total, 120, f"{fraction:.0%}")
        progress_at[event] = count_finished(journal)

    def stop(name: str) -> None:
        code = terminate(procs[name])
        assert code == 0, f"{name} exited {code} after SIGTERM:\n{logs[name].read_text()[-3000:]}"

    try:
        start("A")
        start("B")
        reach(0.15, "C joins")
        start("C")
        reach(0.40, "A leaves (SIGTERM)")
        stop("A")
        reach(0.60, "D joins")
        start("D")
        reach(0.75, "C leaves (SIGTERM)")
        stop("C")
        reach(1.0, "all finished")
        stop("B")
        stop("D")
    finally:
        kill_all(procs.values())

    events = read_journal(journal)
    report = check(events, dict.fromkeys(keys, per_key))
    print(f"progress at each membership change: {progress_at}")
    print(f"order report: {report.summary()}")
    assert not report.missing, report.summary()
    assert not report.violations, report.summary()
    # Duplicates only around a hand-over: a redone record was first finished by another member
    # that owned its partition before (never twice by one process, never without a move).
    ends: dict[tuple[bytes | None, int], list[int]] = {}
    for event in events:
        if event.kind == "E":
            ends.setdefault((event.key, event.seq), []).append(event.pid)
    for rid, pids in ends.items():
        assert len(pids) == len(set(pids)), f"{rid} finished twice by one process: {pids}"
    print(f"duplicates around hand-overs: {report.duplicates} of {total}")
    assert progress_at["C leaves (SIGTERM)"] < total, "the run ended before the last hand-over"
    wait_committed_to_end(bootstrap, group, topic)


def test_stop_during_a_rebalance_commits_what_it_finished(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    """A member told to stop while a rebalance is under way still commits before it leaves.

    Member C owns both partitions; D joins; C gives one partition up in the revoke callback
    and is told to stop right then, while the group is still rebalancing. Its shutdown commit
    must land (retried after the rejoin, or made inside the group's revoke), or D, taking over
    the other partition from an older commit, processes again what C had finished.
    """
    topic = new_topic(partitions=2)
    group = new_group("stop-rebalance")
    keys = [f"k{i}".encode() for i in range(50)]
    produce(kafka_bootstrap, topic, sequenced(keys, 100))
    total = 50 * 100
    done: dict[str, list[tuple[int, int]]] = {"C": [], "D": []}
    lock = threading.Lock()

    def handler_for(name: str):
        def handle(record: keyshared.Record) -> None:
            if name == "C":
                time.sleep(0.005)  # C must still be busy when D joins
                if stopping.is_set():
                    time.sleep(0.3)  # the shutdown drain has something to wait for
            with lock:
                done[name].append((record.partition, record.offset))

        return handle

    config = {"bootstrap.servers": kafka_bootstrap, "group.id": group}
    c = keyshared.KeySharedConsumer(config, [topic], handler_for("C"), workers=2, poison="drop")
    d = keyshared.KeySharedConsumer(config, [topic], handler_for("D"), workers=4, poison="drop")

    stopping = threading.Event()

    class StopOnRevoke(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("revoke: released") and c.wait_started(0):
                stopping.set()
                c.stop()

    watcher = StopOnRevoke()
    poll_log = logging.getLogger("keyshared.kafka.poll_loop")
    poll_log.addHandler(watcher)
    previous_level = poll_log.level
    poll_log.setLevel(logging.INFO)
    threads = [threading.Thread(target=x.run, daemon=True) for x in (c, d)]
    try:
        threads[0].start()
        wait_for(lambda: len(done["C"]) >= total // 10, 30, "C to process a tenth")
        threads[1].start()
        threads[0].join(60)
        assert not threads[0].is_alive(), "C did not stop"
        wait_for(lambda: len(set(done["C"]) | set(done["D"])) >= total, 60, "every record")
    finally:
        poll_log.removeHandler(watcher)
        poll_log.setLevel(previous_level)
        c.stop()
        d.stop()
        for thread in threads:
            thread.join(60)
    redone = set(done["C"]) & set(done["D"])
    print(f"C finished {len(done['C'])}, D {len(done['D'])}, redone by D: {len(redone)}")
    assert not redone, (
        f"{len(redone)} records finished by C before its graceful stop were processed again by D "
        f"(e.g. {sorted(redone)[:5]}): C's shutdown commit did not land"
    )


def test_the_checker_catches_what_it_must() -> None:
    """The order checker itself: overlap, order, replay order, loss and duplicates."""
    from tests.kafka.support.journal import Event

    def ev(kind: str, seq: int, t: int, pid: int = 1) -> Event:
        return Event(kind, b"k", seq, pid, 0, seq, t, 1)

    good = [ev("S", 1, 1), ev("E", 1, 2), ev("S", 2, 3), ev("E", 2, 4)]
    assert not check(good, {b"k": 2}).violations
    overlap = [ev("S", 1, 1), ev("S", 2, 2), ev("E", 1, 3), ev("E", 2, 4)]
    assert check(overlap, {b"k": 2}).violations
    early = [ev("S", 2, 1), ev("E", 2, 2), ev("S", 1, 3), ev("E", 1, 4)]
    assert check(early, {b"k": 2}).violations
    lost = check(good[:2], {b"k": 2})
    assert lost.missing == [(b"k", 2)]
    redo = [*good, ev("S", 2, 5, pid=2), ev("E", 2, 6, pid=2)]
    assert check(redo, {b"k": 2}).duplicates == 1
    backwards = [*good, ev("S", 1, 5), ev("E", 1, 6)]
    assert check(backwards, {b"k": 2}).violations
    # A call cut short by a kill ends at the kill; one that never ends otherwise is flagged.
    cut = [ev("S", 1, 1), ev("S", 1, 5, pid=2), ev("E", 1, 6, pid=2)]
    assert not check(cut, {b"k": 1}, killed={1: 3}).violations
    assert check(cut, {b"k": 1}).violations
