"""A dead letter abandoned with its partition releases its record (issue 24, defect 3).

Member A (``partition`` mode with leases, ``dead_letter``) fails a record whose DLQ topic does
not exist: the write is held, retried with backoff, and the record stays in flight. Member B
joins (a forced revoke); A's drain times out after 1 s and the partition is gone from A. The
pending write is then abandoned (its next owner redoes the record), and it must stop counting
as running: before the fix it did not, so A kept the partition's lease for good and B waited
forever.
"""

from __future__ import annotations

import uuid
import zlib

from prometheus_client import REGISTRY

from coordinator import ZooKeeperCoordinator
from tests.coordinator.conftest import WAIT_S
from tests.coordinator.members import StartMember
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.journal import produce

EAGER = {"partition.assignment.strategy": "range"}  # A keeps partition 0, B gets 1
BAD = next(f"bad-{i}".encode() for i in range(100) if zlib.crc32(f"bad-{i}".encode()) % 2 == 1)


def test_a_dead_letter_abandoned_by_a_revoke_lets_the_lease_go(
    start: StartMember,
    admin: ZooKeeperCoordinator,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
) -> None:
    topic = new_topic(2)  # type: ignore[operator]
    group = new_group("abandoned-dlq")  # type: ignore[operator]
    missing = f"missing-dlq-{uuid.uuid4().hex[:8]}"
    produce(kafka_bootstrap, topic, [(BAD, 1)])
    options = {
        "mode": "partition",
        "poison": "dead_letter",
        "dlq_topic": missing,
        "drain_timeout": 1.0,
        "kafka": EAGER,
    }

    def fail(record: object) -> None:
        raise RuntimeError("poison")

    start(group, topic, Recorder(fail, pid=1), member="A", **options)
    failures = {"group": group, "member": "A", "dlq_topic": missing}
    wait_until(
        lambda: (
            (REGISTRY.get_sample_value("keyshared_dlq_write_failures_total", failures) or 0) >= 1
        ),
        "A's dead letter to fail (no DLQ topic)",
        WAIT_S * 2,
    )

    start(group, topic, Recorder(fail, pid=2), member="B", **options)

    def b_holds_partition_1() -> bool:
        return any(
            lease.member_id == "B" and lease.held and lease.key.endswith("@1")
            for lease in admin.status(group).partition_leases
        )

    wait_until(b_holds_partition_1, "B to be granted partition 1 after A's revoke", WAIT_S * 2)
