"""``key_shared``: a member's read keeps the blocked keys of ranges it does not hold.

Every ``key_shared`` member reads every partition, and at each read it used to clear every
blocked-key record of those partitions from the key-state topic (a block lives in the memory of
the member that hit it; after a move the record is tried again). Records of keys another member
owns were erased too, so ``keyshared status`` lost them while their owner still held them
(issue 24). A read now clears only the blocked records of keys it will run itself.
"""

from __future__ import annotations

import keyshared
from coordinator import ZooKeeperCoordinator
from keyshared.kafka.keystate import KeyStateStore
from keyshared.runtime.scheduler import Scheduler
from tests.coordinator.conftest import WAIT_S
from tests.coordinator.members import StartMember, keys_in
from tests.coordinator.test_key_shared import HIGH, LOW, Sequencer
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.journal import produce


def test_reads_of_other_members_keep_a_blocked_key_they_do_not_own(
    start: StartMember,
    admin: ZooKeeperCoordinator,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
) -> None:
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("ks-blocked-kept")  # type: ignore[operator]
    bad = keys_in(HIGH, 1, "bad")[0]
    low = keys_in(LOW, 6, "low")
    seq = Sequencer()

    def fail_the_bad_key(record: keyshared.Record) -> None:
        if record.raw_key == bad:
            raise RuntimeError("poison")

    admin.pins(group).set(HIGH, "B")  # B keeps the bad key's range through every plan
    admin.pins(group).set(LOW, "A")
    a_journal, c_journal = Recorder(pid=1), Recorder(pid=3)
    start(group, topic, a_journal, member="A", poison="block")
    start(group, topic, Recorder(fail_the_bad_key, pid=2), member="B", poison="block")
    produce(kafka_bootstrap, topic, seq.records([bad, *low], 1))

    scheduler = Scheduler()
    config = {"bootstrap.servers": kafka_bootstrap}
    store = KeyStateStore(config, group, lambda *_: None, scheduler.call_later)
    try:
        wait_until(lambda: _topic_exists(store), "the key-state topic to exist", WAIT_S)

        def blocked() -> bool:
            store.sync(WAIT_S)
            return store.get(topic, 0, bad) is not None

        wait_until(blocked, "B to record the bad key as blocked", WAIT_S * 2)
        wait_until(lambda: a_journal.finished() >= len(low), "A to run the lower half", WAIT_S)

        # C joins: the lower half is split between A and C, so both read their ranges again.
        admin.pins(group).release(LOW)
        start(group, topic, c_journal, member="C", poison="block")

        def a_and_c_hold_ranges() -> bool:
            ranges = admin.status(group).ranges
            held = {r.owner for r in ranges if r.lease_holders == (r.owner,)}
            return {"A", "B", "C"} <= held

        wait_until(a_and_c_hold_ranges, "A, B and C to hold their ranges", WAIT_S * 2)
        # Records after both reads: once A and C have run them, their reads (and the clean-up
        # that comes with a read) are done.
        produce(kafka_bootstrap, topic, seq.records(low, 1))
        wait_until(
            lambda: a_journal.finished() + c_journal.finished() >= 2 * len(low),
            "A and C to run the lower half's new records",
            WAIT_S * 2,
        )
        store.sync(WAIT_S)
        state = store.get(topic, 0, bad)
        assert state is not None and state.state == "blocked", (
            "another member's read erased the blocked key that B still holds"
        )
    finally:
        store.close()
        scheduler.close()


def _topic_exists(store: KeyStateStore) -> bool:
    try:
        store.start(create=False)
    except Exception:
        return False
    return True
