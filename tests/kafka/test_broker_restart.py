"""At-least-once and per-key order across a broker restart in the middle of a run.

The broker stops (cleanly, then in a second case with SIGKILL) while records are in flight and
commits are due; the consumer keeps polling through the outage (errors, no crash) and finishes
once the broker is back. Nothing may be lost, order may not break, and the committed offsets
must reach the end.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from keyshared.dev import LocalCluster
from tests.kafka.support.group_journal import (
    GroupJournal,
    committed_and_ends,
    journaled_member,
    produce_paced,
)
from tests.kafka.support.journal import wait_for

RECORDS = 4000
KEYS = 200
PARTITIONS = 3


@pytest.mark.slow
@pytest.mark.parametrize("kill", [False, True], ids=["clean-stop", "sigkill"])
def test_nothing_lost_across_broker_restart(
    kill: bool,
    local_cluster: LocalCluster,
    kafka_bootstrap: str,
    new_topic: Any,
    new_group: Any,
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    group = new_group()
    # Records keep arriving through the outage (the idempotent producer retries), so the broker
    # is sure to go down mid-run.
    producing = threading.Thread(
        target=produce_paced, args=(kafka_bootstrap, topic, RECORDS, KEYS, 400), daemon=True
    )
    producing.start()
    journal = GroupJournal(RECORDS)
    member = journaled_member(
        "only", kafka_bootstrap, topic, group, journal, {"session.timeout.ms": 45000}
    )
    thread = threading.Thread(target=member.run, daemon=True)
    thread.start()
    wait_for(lambda: journal.count() >= RECORDS // 4, 60, "progress before the restart")

    local_cluster.stop_kafka(kill=kill)
    stopped_at = journal.count()
    local_cluster.start_kafka()

    assert journal.all_done.wait(120), f"only {journal.count()} of {RECORDS} after the restart"
    producing.join(60)
    # Every record has run once, but a member that lost its partitions around the restart is
    # still running the uncommitted ones again: stopping it now commits that progress, rightly
    # short of the end (CI, 2026-11-29: [708, 1117, 450] of [1224, 1539, 1237]). The guarantee
    # is that the running member's commits reach the end; the stop must not take them back.
    last: list[tuple[list[int], list[int]]] = []

    def at_the_end() -> bool:
        last[:] = [committed_and_ends(kafka_bootstrap, topic, group, PARTITIONS)]
        return last[0][0] == last[0][1]

    try:
        wait_for(at_the_end, 90, "the running member's commits to reach the end", interval=1.0)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}: committed, ends = {last[0]}; records run again: {journal.duplicates}"
        ) from None
    member.stop()
    thread.join(60)
    assert not thread.is_alive()
    assert stopped_at < RECORDS, "the run finished before the broker went down"
    assert journal.violations == []
    committed, ends = committed_and_ends(kafka_bootstrap, topic, group, PARTITIONS)
    assert committed == ends
