"""``key_shared``: a plan or a grant that arrives while ZooKeeper is away is not lost.

Found by a chaos run's ZooKeeper restart (2026-11-26): a plan change whose lease queueing hit
the restart raised out of the poll thread's request, so the range was queued by nobody until
the next plan; and a lease granted just before the restart, whose cursor writer could not be
made, was neither held nor given back. Either way the range's records were read by nobody.
Here the first queueing, or the first taking up of a grant, fails as ZooKeeper's absence makes
it fail; the member must queue again from its tick and read every record. Both failed before
the fix (the member never held its range).
"""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from coordinator import ZooKeeperCoordinator
from keyshared.modes import held_ranges, lease_queue
from tests.coordinator.conftest import WAIT_S
from tests.coordinator.members import StartMember
from tests.coordinator.test_key_shared import Sequencer
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.journal import produce


def _fail_once(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[str]:
    """``owner.name`` raises ConnectionLoss on its first call, as with ZooKeeper away."""
    original = getattr(owner, name)
    failed: list[str] = []

    def flaky(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not failed:
            failed.append(name)
            raise ConnectionLoss()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, flaky)
    return failed


@pytest.mark.parametrize("where", ["queueing", "grant"])
def test_a_range_whose_queueing_or_grant_zookeeper_broke_is_queued_again(
    where: str,
    start: StartMember,
    admin: ZooKeeperCoordinator,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if where == "queueing":
        failed = _fail_once(monkeypatch, lease_queue.LeaseQueue, "queue")
    else:
        failed = _fail_once(monkeypatch, held_ranges.HeldRanges, "add")
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("ks-zk-blip")  # type: ignore[operator]
    keys = [f"k{i}".encode() for i in range(8)]
    seq = Sequencer()
    journal = Recorder(pid=1)
    start(group, topic, journal, member="A")
    leases = admin.range_leases(group, "observer")
    wait_until(lambda: bool(failed), f"the injected failure of the first {where}", WAIT_S)
    wait_until(
        lambda: any(lease.member_id == "A" and lease.held for lease in leases.read()),
        "A to queue again and hold its range",
        WAIT_S,
    )
    produce(kafka_bootstrap, topic, seq.records(keys, 3))
    wanted = {(key, n) for key in keys for n in range(1, seq.counts[key] + 1)}
    wait_until(
        lambda: wanted <= {(e.key, e.seq) for e in journal.snapshot() if e.kind == "E"},
        "A to process every record",
        WAIT_S,
    )
