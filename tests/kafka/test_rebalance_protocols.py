"""Hand-overs under every group protocol keyshared claims: per-key order and completeness.

One member starts alone, a second joins mid-run (partitions move while records are in flight),
then the first leaves (its partitions move again), while records keep arriving. The shared
journal checks the per-key order guarantee across hand-overs at every handler start.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.kafka.support.group_journal import (
    GroupJournal,
    committed_and_ends,
    journaled_member,
    produce_paced,
)
from tests.kafka.support.journal import wait_for

RECORDS = 6000
KEYS = 300
PARTITIONS = 4

PROTOCOLS = {
    "cooperative-sticky": {"partition.assignment.strategy": "cooperative-sticky"},
    "eager-range": {"partition.assignment.strategy": "range"},
    "kip848-consumer": {"group.protocol": "consumer"},
}


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_handover_keeps_per_key_order(
    protocol: str, kafka_bootstrap: str, new_topic: Any, new_group: Any
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    group = new_group()
    journal = GroupJournal()
    enough = threading.Event()  # traffic flows until the hand-overs under test have happened

    def produce() -> None:
        journal.expect(produce_paced(kafka_bootstrap, topic, RECORDS, KEYS, until=enough))

    producing = threading.Thread(target=produce, daemon=True)
    producing.start()
    extra = PROTOCOLS[protocol]
    first = journaled_member("first", kafka_bootstrap, topic, group, journal, extra)
    second = journaled_member("second", kafka_bootstrap, topic, group, journal, extra)
    threads = [threading.Thread(target=c.run, daemon=True) for c in (first, second)]
    threads[0].start()
    wait_for(lambda: journal.count() >= RECORDS // 10, 60, "the first member to progress")
    threads[1].start()
    wait_for(lambda: journal.by_member["second"] >= 200, 60, "the joining member to get work")
    first.stop()
    threads[0].join(60)
    assert not threads[0].is_alive(), "the first member did not stop"
    enough.set()
    producing.join(60)
    assert journal.all_done.wait(90), f"only {journal.count()} of {journal.expected} processed"
    second.stop()
    threads[1].join(60)

    assert journal.violations == []
    assert journal.by_member["first"] > 0 and journal.by_member["second"] > 0
    # Drains finish before hand-over and commits happen on revoke, so nothing is redone.
    assert journal.duplicates == 0
    committed, ends = committed_and_ends(kafka_bootstrap, topic, group, PARTITIONS)
    assert committed == ends
    if protocol == "kip848-consumer":
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        description = admin.describe_consumer_groups([group])[group].result()
        assert description.type.name == "CONSUMER"
