"""A lease wait that breaks while the session lives is queued for again, in both modes that
queue for leases (``key_shared`` ranges, ``partition`` mode's partitions), without a new plan;
and a broken wait for ``exclusive``'s lock contends again.

Two ways a wait breaks with the session alive: its queued znode is deleted by someone else
(the wait ends ``Fenced``), or the wait fails and queueing again finds ZooKeeper away. A
session loss would make the session gate withdraw and queue again; here nothing does but the
member itself. One member, one topic, nothing else changing: a range or partition left
pending, or unqueued until the next plan, is read by nobody for good. Both ``fenced`` cases
and ``key_shared``'s ``failing`` case failed before the fix (the member never held what it was
given); ``partition`` mode already queued a failed queueing again from its tick.
"""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from coordinator import ZooKeeperCoordinator
from coordinator import exclusive as exclusive_recipe
from coordinator import leases as lease_recipes
from tests.coordinator.conftest import WAIT_S
from tests.coordinator.members import StartMember
from tests.coordinator.test_key_shared import Sequencer
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.journal import produce


def _break_first_wait(monkeypatch: pytest.MonkeyPatch, how: str) -> list[str]:
    """The first lease wait breaks: ``fenced`` deletes its znode first (the wait finds it gone),
    ``failing`` withdraws it and raises, and the next ``begin`` (the queue's own retry) finds
    ZooKeeper away."""
    wait, begin = lease_recipes.PendingLease.wait, lease_recipes._Leases._begin
    broken: list[str] = []

    def breaking_wait(self: lease_recipes.PendingLease, *args: Any, **kwargs: Any) -> Any:
        if not broken:
            broken.append(self.path)
            if how == "fenced":
                self._client.delete(self.path)
            else:
                self._withdraw()
                raise RuntimeError("the wait broke")
        return wait(self, *args, **kwargs)

    def flaky_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        if how == "failing" and len(broken) == 1:
            broken.append("begin")
            raise ConnectionLoss()
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(lease_recipes.PendingLease, "wait", breaking_wait)
    monkeypatch.setattr(lease_recipes._Leases, "_begin", flaky_begin)
    return broken


@pytest.mark.parametrize("mode", ["key_shared", "partition"])
@pytest.mark.parametrize("how", ["fenced", "failing"])
def test_a_broken_lease_wait_is_queued_again_and_every_record_is_read(
    how: str,
    mode: str,
    start: StartMember,
    admin: ZooKeeperCoordinator,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = _break_first_wait(monkeypatch, how)
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group(f"lease-wait-{how}")  # type: ignore[operator]
    keys = [f"k{i}".encode() for i in range(8)]
    seq = Sequencer()
    journal = Recorder(pid=1)
    start(group, topic, journal, member="A", mode=mode)
    leases: Any = (
        admin.range_leases(group, "observer")
        if mode == "key_shared"
        else admin.partition_leases(group, "observer")
    )
    wait_until(lambda: bool(broken), f"the first lease wait to break ({how})", WAIT_S)
    wait_until(
        lambda: any(lease.member_id == "A" and lease.held for lease in leases.read()),
        "A to queue again and hold its lease",
        WAIT_S,
    )
    produce(kafka_bootstrap, topic, seq.records(keys, 3))
    wanted = {(key, n) for key in keys for n in range(1, seq.counts[key] + 1)}
    wait_until(
        lambda: wanted <= {(e.key, e.seq) for e in journal.snapshot() if e.kind == "E"},
        "A to process every record",
        WAIT_S,
    )


def test_a_broken_wait_for_the_exclusive_lock_contends_again(
    start: StartMember,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The one member of an exclusive group whose first wait for the lock fails (the session
    alive) contends again and becomes active; before, it stayed a standby for good."""
    acquire = exclusive_recipe.ExclusiveLock.acquire
    broken: list[str] = []

    def breaking_acquire(self: exclusive_recipe.ExclusiveLock, *args: Any, **kwargs: Any) -> Any:
        if not broken:
            broken.append(self.member_id)
            raise RuntimeError("the wait broke")
        return acquire(self, *args, **kwargs)

    monkeypatch.setattr(exclusive_recipe.ExclusiveLock, "acquire", breaking_acquire)
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("lock-wait")  # type: ignore[operator]
    keys = [f"k{i}".encode() for i in range(8)]
    seq = Sequencer()
    journal = Recorder(pid=1)
    start(group, topic, journal, member="A", mode="exclusive")
    wait_until(lambda: bool(broken), "the first wait for the lock to break", WAIT_S)
    produce(kafka_bootstrap, topic, seq.records(keys, 3))
    wanted = {(key, n) for key in keys for n in range(1, seq.counts[key] + 1)}
    wait_until(
        lambda: wanted <= {(e.key, e.seq) for e in journal.snapshot() if e.kind == "E"},
        "A to become active and process every record",
        WAIT_S,
    )
