"""Exclusive mode: one active member; a standby takes over when the holder's process is
killed with SIGKILL (its session expires); a waiting standby can be cancelled."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from coordinator.errors import AcquireCancelled
from coordinator.exclusive import ExclusiveLock
from coordinator.layout import GroupLayout
from tests.coordinator.conftest import WAIT_S, ClientFactory, take

_HOLDER = """
import sys, threading
from kazoo.client import KazooClient
from coordinator.exclusive import ExclusiveLock
from coordinator.layout import GroupLayout
client = KazooClient(hosts=sys.argv[1], timeout=1.0)
client.start(timeout=15)
lock = ExclusiveLock(client, GroupLayout(sys.argv[2], sys.argv[3]), "holder")
assert lock.acquire(timeout=15)
print("active", lock.token, flush=True)
threading.Event().wait()
"""


def _acquire_in_background(lock: ExclusiveLock) -> queue.Queue[bool | BaseException]:
    outcome: queue.Queue[bool | BaseException] = queue.Queue()

    def run() -> None:
        try:
            outcome.put(lock.acquire())
        except BaseException as error:
            outcome.put(error)

    threading.Thread(target=run, daemon=True).start()
    return outcome


def test_one_active_and_takeover_after_kill_9(
    zk_client: ClientFactory, layout: GroupLayout, zookeeper_hosts: str
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, zookeeper_hosts, layout.group, layout.namespace],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()  # blocks until the holder is active (or exits)
        assert line.startswith("active"), f"holder did not become active: {line!r}"
        standby = ExclusiveLock(zk_client(), layout, "standby")
        assert standby.holder() == "holder"
        outcome = _acquire_in_background(standby)
        assert not standby.is_active and outcome.empty()

        killed_at = time.monotonic()
        os.kill(holder.pid, signal.SIGKILL)  # no clean close: ZooKeeper must expire it
        assert take(outcome, "the standby taking over") is True
        took = time.monotonic() - killed_at
        assert standby.is_active and standby.holder() == "standby"
        assert standby.token > int(line.split()[1])
        assert took < 1.0 + 5.0, f"takeover took {took:.1f} s with a 1 s session"
        standby.release()
        assert standby.holder() is None
    finally:
        holder.kill()
        holder.wait()


def test_a_standby_times_out_or_is_cancelled(zk_client: ClientFactory, layout: GroupLayout) -> None:
    active = ExclusiveLock(zk_client(), layout, "active")
    assert active.acquire(timeout=WAIT_S)
    standby = ExclusiveLock(zk_client(), layout, "standby")
    assert standby.acquire(timeout=0.3) is False
    outcome = _acquire_in_background(standby)
    standby.cancel()
    assert isinstance(take(outcome, "cancellation"), AcquireCancelled)
    assert active.holder() == "active"
    with pytest.raises(AssertionError):
        take(outcome, "nothing more", timeout=0.1)
