"""Digest ACLs: with ``auth``, a client without the group's credentials can read its znodes but
not change leases, the assignment, cursors, pins or members."""

from __future__ import annotations

import pytest
from kazoo.exceptions import NoAuthError

from coordinator import MemberInfo, ZooKeeperCoordinator
from keyshared.core.slots import SlotRange
from keyshared.dev.topics import unique_name
from tests.coordinator.conftest import NAMESPACE, ClientFactory


def test_a_client_without_credentials_cannot_write(
    zookeeper_hosts: str, zk_client: ClientFactory
) -> None:
    group = unique_name("acl")
    owner = ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE, auth=("orders", "s3cret"))
    owner.start()
    try:
        layout = owner.layout(group)
        owner.join(group, MemberInfo("a"))
        lease = owner.range_leases(group, "a").acquire(SlotRange(0, 65535), generation=1)
        writer = owner.cursor_writer(group, lease)
        writer.stage("payments", 0, 42)
        writer.flush()
        owner.pins(group).set(SlotRange(0, 9), "a")
        owner.client.create(layout.assignment, b"")

        intruder = zk_client()
        cursor = layout.cursor(lease.slots, "payments", 0)
        assert intruder.get(cursor)[0]  # reading stays open (keyshared status)
        attempts = {
            "overwrite the assignment": lambda: intruder.set(layout.assignment, b"{}"),
            "delete a lease": lambda: intruder.delete(lease.path),
            "queue a lease": lambda: intruder.create(
                f"{layout.leases}/00000-65535-", b"{}", ephemeral=True, sequence=True
            ),
            "overwrite a cursor": lambda: intruder.set(cursor, b"{}"),
            "add a pin": lambda: intruder.create(f"{layout.pins}/00100-00199@x", b""),
            "remove a member": lambda: intruder.delete(layout.member("a")),
            "join as a member": lambda: intruder.create(layout.member("x"), b"{}"),
        }
        for what, attempt in attempts.items():
            with pytest.raises(NoAuthError):
                attempt()
                pytest.fail(f"a client without credentials could {what}")

        # the same credentials from another session can
        other = ZooKeeperCoordinator(
            zookeeper_hosts, namespace=NAMESPACE, auth=("orders", "s3cret")
        ).start()
        try:
            other.client.set(layout.assignment, b"")
        finally:
            other.close()
    finally:
        owner.client.delete(f"{NAMESPACE}/groups/{group}", recursive=True)
        owner.close()


def test_a_client_without_credentials_cannot_touch_partition_leases_or_the_active_lock(
    zookeeper_hosts: str, zk_client: ClientFactory
) -> None:
    """Issue 12's znodes: partition-mode leases and exclusive mode's lock contenders."""
    group = unique_name("acl12")
    owner = ZooKeeperCoordinator(zookeeper_hosts, namespace=NAMESPACE, auth=("orders", "s3cret"))
    owner.start()
    try:
        layout = owner.layout(group)
        lease = owner.partition_leases(group, "a").acquire("payments", 0, generation=1)
        active = owner.exclusive(group, "a")
        assert active.acquire(timeout=10)
        lock_node = f"{layout.active}/{owner.client.get_children(layout.active)[0]}"

        intruder = zk_client()
        assert intruder.get(lease.path)[0]  # reading stays open (keyshared status)
        attempts = {
            "delete a partition lease": lambda: intruder.delete(lease.path),
            "overwrite a partition lease": lambda: intruder.set(lease.path, b"{}"),
            "queue for a partition lease": lambda: intruder.create(
                f"{layout.partition_leases}/payments@0-", b"{}", ephemeral=True, sequence=True
            ),
            "delete the active member's lock node": lambda: intruder.delete(lock_node),
            "queue for the active lock": lambda: intruder.create(
                f"{layout.active}/x__lock__", b"x", ephemeral=True, sequence=True
            ),
        }
        for what, attempt in attempts.items():
            with pytest.raises(NoAuthError):
                attempt()
                pytest.fail(f"a client without credentials could {what}")
        assert owner.partition_leases(group, "a").is_held(lease) and active.is_active
    finally:
        owner.client.delete(f"{NAMESPACE}/groups/{group}", recursive=True)
        owner.close()
