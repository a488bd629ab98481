"""``key_shared`` members on threads of the test, each with its own ZooKeeper session.

Separate ``ZooKeeperCoordinator`` instances mean separate sessions, so leases, the election and
expiry behave exactly as across processes; the tests that need real processes (kill -9) use
``keyshared run`` instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import keyshared
from coordinator import ZooKeeperCoordinator
from keyshared.core.slots import SlotRange, slot_of
from tests.coordinator.conftest import NAMESPACE
from tests.kafka.support.inprocess import FAST_RETRY, Running

__all__ = ["StartMember", "keys_in", "members_for"]

StartMember = Callable[..., Running]


def keys_in(slots: SlotRange, count: int, prefix: str = "k") -> list[bytes]:
    """``count`` distinct keys whose slot lies in ``slots``."""
    found: list[bytes] = []
    i = 0
    while len(found) < count:
        key = f"{prefix}{i}".encode()
        if slots.lo <= slot_of(key) <= slots.hi:
            found.append(key)
        i += 1
    return found


def members_for(bootstrap: str, zookeeper: str) -> Iterator[StartMember]:
    """Body of a fixture: ``start(group, topic, handler, member, kafka={...}, **options)``
    (``kafka``: extra client properties)."""
    started: list[Running] = []

    def start(
        group: str,
        topic: str,
        handler: Callable[..., object],
        member: str = "",
        session_timeout: float = 6.0,
        kafka: dict[str, Any] | None = None,
        **options: Any,
    ) -> Running:
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": member or f"m-{uuid.uuid4().hex[:8]}",
            **(kafka or {}),
        }
        zk = ZooKeeperCoordinator(zookeeper, namespace=NAMESPACE, session_timeout=session_timeout)
        options = {
            "workers": 8,
            "commit_interval": 0.1,
            "retry": FAST_RETRY,
            "mode": "key_shared",
            "drain_timeout": 20.0,
            **options,
        }
        consumer = keyshared.KeySharedConsumer(config, [topic], handler, coordinator=zk, **options)
        run = Running(consumer)
        run.zk = zk  # type: ignore[attr-defined]  # for tests that expire the member's session
        started.append(run)
        return run

    yield start
    for run in started:
        run.consumer.stop()
    for run in started:
        run.join()
