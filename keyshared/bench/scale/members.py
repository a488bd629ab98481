"""Simulated ``key_shared`` members: :class:`SimMember`, one member's ZooKeeper traffic through
the coordinator's own recipes, and :class:`SimGroup`, N of them in this process with the
commit rounds and the leader's low-watermark pass.

Apart from the measurement so that what a member does (and what it is not: no Kafka, no
handlers, nothing in flight) reads in one place, next to the key_shared member it imitates
(``keyshared/modes/key_shared.py``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from keyshared.core.slots import SlotRange

__all__ = ["COMMIT_INTERVAL_S", "WATERMARK_EVERY_S", "SimGroup", "SimMember"]

log = logging.getLogger(__name__)

COMMIT_INTERVAL_S = 1.0  # ConsumerOptions.commit_interval's default
WATERMARK_EVERY_S = 5.0  # the leader's low-watermark pass (keyshared/modes/key_shared.py)


class SimMember:
    """One ``key_shared`` member's ZooKeeper traffic, through the coordinator's recipes."""

    def __init__(
        self,
        hosts: str,
        group: str,
        namespace: str,
        member_id: str,
        partitions: int,
        on_written: Callable[[Any], None],
        session_timeout: float = 30.0,
        reread_all: bool = False,
    ) -> None:
        from kazoo.client import KazooClient

        from coordinator.layout import GroupLayout
        from coordinator.leases import RangeLeases

        self.member_id = member_id
        self.partitions = partitions
        self.reread_all = reread_all
        self.client = KazooClient(hosts=hosts, timeout=session_timeout)
        self.client.start(timeout=30)
        self.layout = GroupLayout(group, namespace)
        self.layout.ensure(self.client)
        self.leases = RangeLeases(self.client, self.layout, member_id)
        self._on_written = on_written
        self.lock = threading.Lock()  # guards held/writers against the flush rounds
        self.held: dict[SlotRange, Any] = {}
        self.writers: dict[SlotRange, Any] = {}
        self.seen: dict[int, float] = {}  # generation -> when its change reached this member
        self.settled: dict[int, float] = {}  # generation -> leases granted and cursors re-read
        self.rereads: list[tuple[int, float, int]] = []  # (generation, seconds, cursors read)
        self.grant_waits: list[tuple[int, float]] = []  # (generation, seconds waited per lease)
        self.moves_gained: dict[int, int] = {}
        self.offset = 0
        self.watch: Any = None
        self.leader: Any = None
        self.membership: Any = None

    def start(self) -> None:
        from coordinator.assignment import AssignmentWatch
        from coordinator.leader import AssignmentLeader
        from coordinator.members import MemberInfo, Membership

        self.membership = Membership(
            self.client, self.layout, MemberInfo(self.member_id, topics=("scale",))
        )
        self.membership.join()
        self.leader = AssignmentLeader(self.client, self.layout, self.member_id, self._on_written)
        self.leader.start()
        self.watch = AssignmentWatch(self.client, self.layout, self.member_id, self._on_change)

    def _stage(self, writer: Any) -> None:
        for partition in range(self.partitions):
            writer.stage("scale", partition, self.offset)

    def _on_change(self, change: Any) -> None:
        from coordinator.cursors import CursorWriter, flush_together, read_cursors
        from coordinator.errors import CoordinatorError

        self.seen[change.generation] = time.monotonic()
        with self.lock:  # lose first: every range's final cursors, then release the lost
            if change.release:  # (a drain of the whole member; nothing in flight here)
                for writer in self.writers.values():
                    self._stage(writer)
                flush_together(list(self.writers.values()))
            for slots in change.release:
                self.writers.pop(slots, None)
                lease = self.held.pop(slots, None)
                if lease is not None:
                    self.leases.release(lease)
        pending = [(s, self.leases.begin(s, generation=change.generation)) for s in change.acquire]
        self.moves_gained[change.generation] = len(pending)
        for slots, queued in pending:
            began = time.monotonic()
            try:
                lease = queued.wait(timeout=60)
            except CoordinatorError:
                log.warning("%s: lease %s not granted", self.member_id, slots)
                continue
            self.grant_waits.append((change.generation, time.monotonic() - began))
            with self.lock:
                self.held[slots] = lease
                self.writers[slots] = CursorWriter(self.client, self.layout, lease)
        if change.acquire or change.release:
            began = time.monotonic()  # the member's re-read
            if self.reread_all:  # as key_shared members did: every cursor of the group
                cursors = read_cursors(self.client, self.layout)
            else:  # as a key_shared member does: the ranges overlapping what it holds
                cursors = read_cursors(self.client, self.layout, change.owned)
            self.rereads.append((change.generation, time.monotonic() - began, len(cursors)))
            with self.lock:  # the new ranges' first cursors, in one transaction
                gained = [self.writers[s] for s in change.acquire if s in self.writers]
                for writer in gained:
                    self._stage(writer)
                flush_together(gained)
        self.settled[change.generation] = time.monotonic()

    def flush(self) -> tuple[int, int]:
        """One commit interval: the cursors of every held range in one transaction, fenced by
        each range's lease, as the member does; (cursors written, transactions)."""
        from coordinator.cursors import flush_together

        self.offset += 100
        with self.lock:
            for writer in self.writers.values():
                self._stage(writer)
            report = flush_together(list(self.writers.values()))
        return sum(report.written.values()), report.transactions

    def close(self) -> None:
        """Leave as a stopping member does: final cursors, then end the session (its member,
        election and lease znodes go at once)."""
        self.flush()
        for stop in (self.watch, self.leader):
            if stop is not None:
                with contextlib.suppress(Exception):
                    stop.stop()
        with contextlib.suppress(Exception):
            self.client.stop()
            self.client.close()


class SimGroup:
    """N simulated members of one group, their commit rounds and the leader's pass."""

    def __init__(self, hosts: str, members: int, partitions: int, reread_all: bool) -> None:
        self.hosts = hosts
        self.reread_all = reread_all
        self.partitions = partitions
        self.group = f"scale-{members}-{int(time.time())}"
        self.namespace = "/keyshared-scale"
        self.written: dict[int, float] = {}
        self.members: list[SimMember] = []
        self.next_id = 0
        self.stop_rounds = threading.Event()
        self.rounds: list[float] = []
        self.cursor_writes = 0
        self.cursor_transactions = 0
        self.passes: list[float] = []
        self.pool = ThreadPoolExecutor(8, thread_name_prefix="scale-flush")

    def on_written(self, snapshot: Any) -> None:
        self.written[snapshot.generation] = time.monotonic()

    def new_member(self) -> SimMember:
        member = SimMember(
            self.hosts,
            self.group,
            self.namespace,
            f"member-{self.next_id:05d}",
            self.partitions,
            self.on_written,
            reread_all=self.reread_all,
        )
        self.next_id += 1
        return member

    def generation(self) -> int:
        return max(self.written, default=0)

    def settled(self, generation: int) -> bool:
        return all(
            m.settled.get(generation) is not None or _later(m.settled, generation)
            for m in self.members
        )

    def leader(self) -> SimMember | None:
        return next((m for m in self.members if m.leader and m.leader.is_leader), None)

    def rounds_loop(self) -> None:
        """Commit rounds every interval; the leader's low-watermark pass every 5 s."""
        next_pass = time.monotonic() + WATERMARK_EVERY_S
        while not self.stop_rounds.wait(COMMIT_INTERVAL_S):
            self.commit_round()
            if time.monotonic() >= next_pass:
                self.watermark_pass()
                next_pass = time.monotonic() + WATERMARK_EVERY_S

    def commit_round(self) -> None:
        began = time.monotonic()
        for written, transactions in self.pool.map(lambda m: m.flush(), list(self.members)):
            self.cursor_writes += written
            self.cursor_transactions += transactions
        self.rounds.append(time.monotonic() - began)

    def watermark_pass(self) -> None:
        from coordinator.cursors import delete_superseded, read_cursors

        leader = self.leader()
        if leader is None:
            return
        began = time.monotonic()
        with contextlib.suppress(Exception):
            valid = read_cursors(leader.client, leader.layout)
            delete_superseded(leader.client, leader.layout, valid)
        self.passes.append(time.monotonic() - began)


def _later(settled: dict[int, float], generation: int) -> bool:
    return any(g > generation for g in settled)
