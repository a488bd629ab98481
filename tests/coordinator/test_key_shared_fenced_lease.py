"""``key_shared``: a lease found fenced outside a session loss is queued for again.

An operator (or anything else) deletes a member's lease znode while its session lives on. The
member learns it at its next cursor write (refused: the lease is gone), stops the range without
committing, and, since the plan in force still gives it the range, queues for the lease again
(issue 24). Before the fix it re-read without the range and waited for the next plan, which
may never come: the range's records were read by nobody.
"""

from __future__ import annotations

from coordinator import ZooKeeperCoordinator
from tests.coordinator.conftest import WAIT_S
from tests.coordinator.members import StartMember
from tests.coordinator.test_key_shared import Sequencer
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.journal import produce


def test_a_lease_deleted_under_a_live_member_is_queued_for_again(
    start: StartMember,
    admin: ZooKeeperCoordinator,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
) -> None:
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("ks-lease-deleted")  # type: ignore[operator]
    keys = [f"k{i}".encode() for i in range(8)]
    seq = Sequencer()
    journal = Recorder(pid=1)
    start(group, topic, journal, member="A")
    leases = admin.range_leases(group, "observer")

    def held_by_a() -> list[str]:
        return [lease.path for lease in leases.read() if lease.member_id == "A" and lease.held]

    wait_until(lambda: bool(held_by_a()), "A to hold its range", WAIT_S)
    produce(kafka_bootstrap, topic, seq.records(keys, 2))
    wait_until(lambda: journal.finished() >= 16, "A to process the first records", WAIT_S)

    [deleted] = held_by_a()
    admin.client.delete(deleted)  # the session lives on; the lease does not
    # Records keep coming: A's next cursor write finds the lease gone.
    produce(kafka_bootstrap, topic, seq.records(keys, 2))
    wait_until(
        lambda: any(path != deleted for path in held_by_a()),
        "A to queue for its range again and hold it under a new lease",
        WAIT_S * 2,
    )
    produce(kafka_bootstrap, topic, seq.records(keys, 2))
    wanted = {(key, n) for key in keys for n in range(1, seq.counts[key] + 1)}
    wait_until(
        lambda: wanted <= {(e.key, e.seq) for e in journal.snapshot() if e.kind == "E"},
        "A to process every record, those after the fence included",
        WAIT_S * 2,
    )
