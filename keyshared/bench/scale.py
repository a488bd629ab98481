"""The coordinator's scale model: the real planner at 10-1,000 members, and a real ZooKeeper under
simulated ``key_shared`` members (docs/scaling.md).

Two measurements, both on the production code paths:

- **planner** (pure, no I/O): :func:`keyshared.core.assignment.plan_assignment` at N members,
  the first plan and then churn (one member joins, the next event one leaves, alternately):
  time per plan, ranges per member, moves (ranges that change owner, each a drain) and
  members touched per event. Every plan is checked: each slot owned exactly once, by a live
  member, shares within one slot.
- **zookeeper**: N members in this process, each its own kazoo session doing what a
  ``key_shared`` member does with ZooKeeper (``coordinator/plug/key_shared.py``), through the
  coordinator's own recipes: an ephemeral member znode (:class:`Membership`), a candidacy
  (:class:`AssignmentLeader`, which runs the planner and writes the assignment), an
  :class:`AssignmentWatch`; on each generation it writes the final cursors of the ranges it
  loses and releases their leases, queues for the leases of the ranges it gains (the
  mandatory drain: granted once the previous owner released), and re-reads the group's cursors
  as the member does (:func:`read_cursors` of the whole group). Each commit interval every
  held range writes one fenced cursor transaction covering every partition (a busy topic:
  every partition's cursor moved), and the leader runs the low-watermark pass every 5 s
  (read every cursor, delete the superseded ones). No Kafka and no handlers: a drain here is
  the coordination alone, with nothing in flight. ZooKeeper's own counters (``mntr``, and the
  zxid from ``stat``: one per write transaction) give znodes, watches and writes.

Run::

    python -m keyshared.bench.scale --members 10,100 --planner-members 10,100,1000 \
        --partitions 64 --out scale-results.json

It starts a private ZooKeeper (the cached jars of ``keyshared dev``) unless ``--zookeeper``
names one; a private server's ``mntr`` counts only this run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from keyshared.core.assignment import plan_assignment
from keyshared.core.slots import SLOT_COUNT, SlotMap, SlotRange

__all__ = [
    "PlannerFigures",
    "ZooKeeperFigures",
    "check_assignment",
    "measure_planner",
    "measure_zookeeper",
    "private_zookeeper",
]

log = logging.getLogger(__name__)

COMMIT_INTERVAL_S = 1.0  # ConsumerOptions.commit_interval's default
WATERMARK_EVERY_S = 5.0  # the leader's low-watermark pass (coordinator/plug/key_shared.py)


# -- the planner ---------------------------------------------------------------------------------


def check_assignment(assignment: SlotMap, live: list[str]) -> None:
    """Raise AssertionError unless every slot is owned exactly once, by a live member, and
    shares differ by at most one slot (no pins)."""
    covered = 0
    expected_lo = 0
    for slot_range, owner in assignment.items():
        assert slot_range.lo == expected_lo, f"gap or overlap at slot {expected_lo}"
        assert owner in live, f"{slot_range} owned by {owner!r}, not a live member"
        covered += slot_range.size
        expected_lo = slot_range.hi + 1
    assert covered == SLOT_COUNT and expected_lo == SLOT_COUNT, f"{covered} slots covered"
    loads = dict.fromkeys(live, 0)
    for slot_range, owner in assignment.items():
        loads[owner] += slot_range.size
    assert max(loads.values()) - min(loads.values()) <= 1, "shares differ by more than a slot"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


@dataclass
class PlannerFigures:
    members: int
    events: int
    first_plan_ms: float
    plan_ms_p50: float
    plan_ms_p99: float
    plan_ms_max: float
    ranges_per_member_mean: float  # over members and events, after each event
    ranges_per_member_max: int
    ranges_total: int  # after the last event
    moves_per_event_mean: float  # ranges changing owner: one drain each
    moves_per_event_max: int
    members_touched_per_event_mean: float  # members that lose or gain slots: each re-reads
    slots_moved_per_event_mean: float
    join_moves_mean: float
    leave_moves_mean: float
    assignment_bytes: int  # the assignment znode's JSON
    checked_plans: int


def measure_planner(
    members: int, events: int = 100, warmup: int | None = None, seed: int = 27
) -> PlannerFigures:
    """The planner at ``members`` live members: the first plan, ``warmup`` churn events (so
    fragmentation settles, default ``events``), then ``events`` measured ones; a join and a
    leave alternately, the leaver chosen at random (seeded)."""
    from coordinator.assignment import AssignmentSnapshot

    rng = random.Random(seed)
    live = [f"member-{i:05d}" for i in range(members)]
    next_id = members
    began = time.perf_counter()
    current = plan_assignment(SlotMap(), live).assignment
    first_ms = (time.perf_counter() - began) * 1000
    check_assignment(current, live)
    checked = 1
    times: list[float] = []
    per_member: list[int] = []
    moves: list[int] = []
    touched: list[int] = []
    slots_moved: list[int] = []
    joins: list[int] = []
    leaves: list[int] = []
    total = events + (events if warmup is None else warmup)
    for index in range(total):
        joining = index % 2 == 0
        if joining:
            live = [*live, f"member-{next_id:05d}"]
            next_id += 1
        else:
            victim = rng.choice(live)
            live = [m for m in live if m != victim]
        began = time.perf_counter()
        plan = plan_assignment(current, live)
        elapsed = (time.perf_counter() - began) * 1000
        current = plan.assignment
        check_assignment(current, live)
        checked += 1
        if index < total - events:
            continue
        times.append(elapsed)
        counts = [len(current.ranges_of(m)) for m in live]
        per_member.extend(counts)
        moves.append(len(plan.moves))
        (joins if joining else leaves).append(len(plan.moves))
        touched.append(len({m.target for m in plan.moves} | {m.source for m in plan.moves}))
        slots_moved.append(plan.moved_slots)
    size = len(AssignmentSnapshot(1, current, live[0], 0).to_json())
    return PlannerFigures(
        members=members,
        events=events,
        first_plan_ms=round(first_ms, 2),
        plan_ms_p50=round(_pct(times, 0.5), 2),
        plan_ms_p99=round(_pct(times, 0.99), 2),
        plan_ms_max=round(max(times, default=0.0), 2),
        ranges_per_member_mean=round(statistics.fmean(per_member), 2) if per_member else 0.0,
        ranges_per_member_max=max(per_member, default=0),
        ranges_total=len(current),
        moves_per_event_mean=round(statistics.fmean(moves), 1) if moves else 0.0,
        moves_per_event_max=max(moves, default=0),
        members_touched_per_event_mean=round(statistics.fmean(touched), 1) if touched else 0.0,
        slots_moved_per_event_mean=round(statistics.fmean(slots_moved), 1) if slots_moved else 0,
        join_moves_mean=round(statistics.fmean(joins), 1) if joins else 0.0,
        leave_moves_mean=round(statistics.fmean(leaves), 1) if leaves else 0.0,
        assignment_bytes=size,
        checked_plans=checked,
    )


def fragmentation(
    members: int, events: int, every: int, seed: int = 27
) -> list[tuple[int, int, int]]:
    """Ranges under long churn (the churn of :func:`measure_planner`): ``(events so far, ranges
    in all, most ranges of one member)`` every ``every`` events. Counts only: deterministic."""
    rng = random.Random(seed)
    live = [f"member-{i:05d}" for i in range(members)]
    next_id = members
    current = plan_assignment(SlotMap(), live).assignment
    samples: list[tuple[int, int, int]] = []
    for index in range(1, events + 1):
        if index % 2:
            live = [*live, f"member-{next_id:05d}"]
            next_id += 1
        else:
            victim = rng.choice(live)
            live = [m for m in live if m != victim]
        current = plan_assignment(current, live).assignment
        if index % every == 0:
            most = max(len(current.ranges_of(m)) for m in live)
            samples.append((index, len(current), most))
    return samples


# -- ZooKeeper: four-letter words and a private server -----------------------------------------


def four_letter(hosts: str, word: str, timeout: float = 5.0) -> str:
    """The answer of the first server in ``hosts`` to a four-letter word."""
    host, _, port = hosts.split(",")[0].rpartition(":")
    with socket.create_connection((host or "127.0.0.1", int(port)), timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def mntr(hosts: str) -> dict[str, float]:
    """``mntr``'s numeric counters, plus ``zxid`` from ``stat`` (one per write transaction)."""
    counters: dict[str, float] = {}
    try:
        for line in four_letter(hosts, "mntr").splitlines():
            key, _, value = line.partition("\t")
            with contextlib.suppress(ValueError):
                counters[key] = float(value)
        match = re.search(r"Zxid: 0x([0-9a-f]+)", four_letter(hosts, "stat"))
    except OSError:  # a server that does not allow the words: no counters
        return counters
    if match:
        counters["zxid"] = float(int(match.group(1), 16) & 0xFFFFFFFF)
    return counters


def _delta(after: dict[str, float], before: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


SERVER_PID: dict[str, int] = {}  # hosts -> pid of a private server (for its CPU time)


def server_cpu_s(hosts: str) -> float:
    """CPU seconds the private ZooKeeper server at ``hosts`` used so far (0: not ours)."""
    pid = SERVER_PID.get(hosts)
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def private_zookeeper(heap_mb: int = 512) -> Iterator[str]:
    """A standalone ZooKeeper of the dev cluster's jars and settings on a free loopback port,
    stopped (its pid only) on exit. Yields ``127.0.0.1:port``."""
    from keyshared.dev import process, zookeeper
    from keyshared.dev.jars import fetch_jars
    from keyshared.dev.ports import LOOPBACK, free_ports
    from keyshared.dev.tools import find_java

    with tempfile.TemporaryDirectory(prefix="keyshared-scale-") as runtime:
        files = zookeeper.zookeeper_files(Path(runtime))
        port = free_ports(1)[0]
        zookeeper.write_config(files, port)
        command = zookeeper.server_command(find_java(), fetch_jars(), files, heap_mb)
        pid = process.spawn(command, files.console_file, files.home)
        try:
            deadline = time.monotonic() + 60
            while not zookeeper.answers_ruok(port):
                if time.monotonic() > deadline or not process.is_running(pid, str(files.config)):
                    raise RuntimeError(f"ZooKeeper did not start (see {files.console_file})")
                time.sleep(0.2)
            hosts = f"{LOOPBACK}:{port}"
            SERVER_PID[hosts] = pid
            yield hosts
        finally:
            process.stop(pid, str(files.config), 10.0)


# -- ZooKeeper: simulated key_shared members ---------------------------------------------------


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
        reread_all: bool = True,
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
        from coordinator.cursors import CursorWriter, read_cursors
        from coordinator.errors import CoordinatorError

        self.seen[change.generation] = time.monotonic()
        with self.lock:  # lose first: final cursors, then release (nothing in flight here)
            for slots in change.release:
                writer = self.writers.pop(slots, None)
                lease = self.held.pop(slots, None)
                if writer is not None:
                    self._stage(writer)
                    with contextlib.suppress(CoordinatorError):
                        writer.flush()
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
            if self.reread_all:  # as the plug does: every cursor of the group
                cursors = read_cursors(self.client, self.layout)
            else:  # only the ranges overlapping what it holds (docs/scaling.md: the lift)
                cursors = [
                    c for r in change.owned for c in read_cursors(self.client, self.layout, r)
                ]
            self.rereads.append((change.generation, time.monotonic() - began, len(cursors)))
            with self.lock:  # the new ranges' first cursors
                for slots in change.acquire:
                    if slots in self.writers:
                        self._stage(self.writers[slots])
                        self.writers[slots].flush()
        self.settled[change.generation] = time.monotonic()

    def flush(self) -> int:
        """One commit interval: every held range writes its cursors (one fenced transaction)."""
        from coordinator.errors import CoordinatorError

        self.offset += 100
        written = 0
        with self.lock:
            for writer in list(self.writers.values()):
                self._stage(writer)
                with contextlib.suppress(CoordinatorError):
                    written += writer.flush()
        return written

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


@dataclass
class EventFigures:
    kind: str
    generation: int
    written_s: float  # event -> the leader wrote the new generation (planner + reads + write)
    all_seen_s: float  # event -> every live member saw it
    settled_s: float  # event -> every moved range's lease granted and cursors re-read
    moves: int  # ranges gained by some member
    members_touched: int  # members that re-read
    reread_s_mean: float
    reread_s_max: float
    cursors_read: int
    whole_read_s: float  # one whole-group read_cursors after the event, nothing else running
    whole_read_cursors: int
    grant_wait_s_max: float
    zk_writes: int  # zxid delta over the event
    zk_requests: int  # packets received over the event
    server_cpu_s: float  # ZooKeeper's CPU seconds over the event (private server only)


@dataclass
class ZooKeeperFigures:
    members: int
    partitions: int
    reread_all: bool
    form_s: float  # all members started -> every range held and read
    znodes_group: dict[str, int]  # by directory
    znodes_total: int  # mntr zk_znode_count (private server: this run only)
    ephemerals: int
    watches: int
    connections: int
    data_bytes: int  # mntr zk_approximate_data_size
    assignment_bytes: int
    ranges: int
    steady_writes_per_s: float  # zxid/s with the commit rounds and the leader's pass
    steady_cursor_ops_per_s: float  # cursor znodes written per second
    steady_requests_per_s: float
    steady_server_cpu: float  # ZooKeeper's CPU (cores) meanwhile: private server only
    steady_harness_cpu: float  # this process's CPU (cores): the simulated members
    server_cpu_ms_per_write: float  # ZooKeeper CPU per write transaction (reads included)
    zk_avg_latency_ms: float
    zk_max_latency_ms: float
    flush_round_s: float  # one commit interval's cursor writes of every member (median)
    flush_rounds: int
    watermark_pass_s: float  # the leader's pass: read every cursor, delete superseded
    full_read_s: float  # one read_cursors of the whole group
    full_read_cursors: int
    held_leases: int  # granted range leases at the end: one per range, by its owner
    events: list[EventFigures] = field(default_factory=list)


def _group_znodes(client: Any, layout: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in ("members", "leader", "leases", "cursors", "pins", "topics"):
        counts[name] = len(client.get_children(f"{layout.root}/{name}"))
    ranges = client.get_children(layout.cursors)
    listings = [client.get_children_async(f"{layout.cursors}/{r}") for r in ranges]
    counts["cursor_znodes"] = sum(len(listing.get()) for listing in listings)
    return counts


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"scale: {what} did not happen within {timeout:.0f} s")
        time.sleep(0.02)


class _Group:
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
        self.cursor_writes += sum(self.pool.map(lambda m: m.flush(), list(self.members)))
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


def measure_zookeeper(
    hosts: str,
    members: int,
    partitions: int = 64,
    events: int = 4,
    steady_s: float = 10.0,
    say: Callable[[str], None] = lambda _text: None,
    reread_all: bool | None = None,
) -> ZooKeeperFigures:
    """``members`` simulated members on the ZooKeeper at ``hosts``: form the group, run the
    commit rounds for ``steady_s``, then ``events`` churn events (join, leave, ...).

    :param reread_all: members re-read every cursor of the group, as the plug does (default
        up to 20 members), or only those of the ranges they hold (above: N members re-reading
        everything in one Python process measures this process's CPU, not the coordinator);
        each event then also times one whole-group read by one member.
    """
    from coordinator.assignment import read_assignment
    from coordinator.cursors import read_cursors

    if reread_all is None:
        reread_all = members <= 20
    group = _Group(hosts, members, partitions, reread_all)
    timeout = 60.0 + members * 1.0
    try:
        began = time.monotonic()
        group.members = [group.new_member() for _ in range(members)]
        with ThreadPoolExecutor(8) as starter:
            list(starter.map(lambda m: m.start(), group.members))
        say(f"{members} sessions started in {time.monotonic() - began:.1f} s; forming")

        # The group forms through several generations while members join; wait for one that
        # names them all and that everyone settled.
        def formed() -> bool:
            gen = group.generation()
            return gen > 0 and group.settled(gen) and _owners(group) == members

        _wait(formed, timeout, "forming the group")
        form_s = time.monotonic() - began
        say(f"formed in {form_s:.1f} s (generation {group.generation()})")
        # Churn first, so that the steady state after it has the ranges churn leaves.
        rng = random.Random(27)
        churned: list[EventFigures] = []
        for index in range(events):
            group.commit_round()  # what the rounds and the leader's pass would have done
            group.watermark_pass()
            churned.append(_churn(group, index % 2 == 0, rng, timeout))
            say(f"event {index}: {asdict(churned[-1])}")
        group.rounds, group.passes, group.cursor_writes = [], [], 0
        rounds = threading.Thread(target=group.rounds_loop, name="scale-rounds", daemon=True)
        before = mntr(hosts)
        t0 = time.monotonic()
        cpu0, harness0 = server_cpu_s(hosts), time.process_time()
        rounds.start()
        time.sleep(steady_s)
        after = mntr(hosts)
        elapsed = time.monotonic() - t0
        server_cpu = server_cpu_s(hosts) - cpu0
        harness_cpu = time.process_time() - harness0
        group.stop_rounds.set()
        rounds.join()
        passes = list(group.passes)
        group.watermark_pass()  # superseded cursors collected: the steady cursor set
        admin = group.members[0]
        znodes = _group_znodes(admin.client, admin.layout)
        snapshot = read_assignment(admin.client, admin.layout)
        began = time.monotonic()
        cursors = read_cursors(admin.client, admin.layout)
        full_read_s = time.monotonic() - began
        rounds_s = statistics.median(group.rounds) if group.rounds else 0.0
        held = _verify(group, snapshot.assignment, len(cursors))
        figures = ZooKeeperFigures(
            members=members,
            partitions=partitions,
            reread_all=reread_all,
            form_s=round(form_s, 2),
            znodes_group=znodes,
            znodes_total=int(after.get("zk_znode_count", 0)),
            ephemerals=int(after.get("zk_ephemerals_count", 0)),
            watches=int(after.get("zk_watch_count", 0)),
            connections=int(after.get("zk_num_alive_connections", 0)),
            data_bytes=int(after.get("zk_approximate_data_size", 0)),
            assignment_bytes=len(snapshot.to_json()),
            ranges=len(snapshot.assignment),
            steady_writes_per_s=round(_delta(after, before, "zxid") / elapsed, 1),
            steady_cursor_ops_per_s=round(group.cursor_writes / elapsed, 1),
            steady_requests_per_s=round(_delta(after, before, "zk_packets_received") / elapsed, 1),
            steady_server_cpu=round(server_cpu / elapsed, 3),
            steady_harness_cpu=round(harness_cpu / elapsed, 3),
            server_cpu_ms_per_write=round(
                1000 * server_cpu / max(1.0, _delta(after, before, "zxid")), 3
            ),
            zk_avg_latency_ms=after.get("zk_avg_latency", 0.0),
            zk_max_latency_ms=after.get("zk_max_latency", 0.0),
            flush_round_s=round(rounds_s, 3),
            flush_rounds=len(group.rounds),
            watermark_pass_s=round(statistics.fmean(passes), 3) if passes else 0.0,
            full_read_s=round(full_read_s, 3),
            full_read_cursors=len(cursors),
            held_leases=held,
        )
        say(
            f"steady: {figures.steady_writes_per_s} writes/s, {figures.znodes_total} znodes, "
            f"{figures.watches} watches"
        )
        figures.events = churned
        return figures
    finally:
        group.stop_rounds.set()
        with ThreadPoolExecutor(8) as closer:
            list(closer.map(lambda m: m.close(), group.members))
        group.pool.shutdown()
        with contextlib.suppress(Exception):
            from kazoo.client import KazooClient

            admin_client = KazooClient(hosts=hosts)
            admin_client.start(timeout=30)
            admin_client.delete(f"{group.namespace}/groups", recursive=True)
            admin_client.stop()
            admin_client.close()


def _verify(group: _Group, assignment: SlotMap, cursors: int) -> int:
    """Raise AssertionError unless the group is consistent at rest: every slot owned once by a
    live member, one granted lease per range held by its owner, every range's cursor in every
    partition; return the number of granted leases."""
    from coordinator.layout import parse_range
    from coordinator.leases import read_leases

    live = [m.member_id for m in group.members]
    check_assignment(assignment, live)
    admin = group.members[0]
    granted = [info for info in read_leases(admin.client, admin.layout.leases) if info.held]
    by_range = {(parse_range(info.key), info.member_id) for info in granted}
    wanted = {(slots, owner) for slots, owner in assignment.items()}
    assert by_range == wanted, f"leases {sorted(by_range - wanted)} vs {sorted(wanted - by_range)}"
    assert len(granted) == len(wanted), "a range with two granted leases"
    assert cursors == len(wanted) * group.partitions, f"{cursors} cursors"
    return len(granted)


def _owners(group: _Group) -> int:
    from coordinator.assignment import read_assignment

    admin = group.members[0]
    return len(read_assignment(admin.client, admin.layout).assignment.members)


def _churn(group: _Group, joining: bool, rng: random.Random, timeout: float) -> EventFigures:
    """One member joins (or a non-leader leaves); measure until every member settled."""
    from coordinator.cursors import read_cursors

    hosts = group.hosts
    before_gen = group.generation()
    before = mntr(hosts)
    cpu0 = server_cpu_s(hosts)
    if joining:
        member = group.new_member()
        t0 = time.monotonic()
        group.members.append(member)
        member.start()
    else:
        leader = group.leader()
        victim = rng.choice([m for m in group.members if m is not leader])
        t0 = time.monotonic()
        group.members.remove(victim)
        victim.close()
    _wait(lambda: group.generation() > before_gen, timeout, "the next generation")
    generation = group.generation()
    _wait(lambda: group.settled(generation), timeout, f"settling generation {generation}")
    settled_at = max(m.settled.get(generation, t0) for m in group.members)
    seen_at = max(m.seen.get(generation, t0) for m in group.members)
    after = mntr(hosts)
    server_cpu = server_cpu_s(hosts) - cpu0
    rereads = [r for m in group.members for r in m.rereads if r[0] == generation]
    began = time.monotonic()  # one member's whole-group read, alone (the plug's re-read)
    whole = read_cursors(group.members[0].client, group.members[0].layout)
    whole_s = time.monotonic() - began
    waits = [w for m in group.members for g, w in m.grant_waits if g == generation]
    return EventFigures(
        kind="join" if joining else "leave",
        generation=generation,
        written_s=round(group.written[generation] - t0, 3),
        all_seen_s=round(seen_at - t0, 3),
        settled_s=round(settled_at - t0, 3),
        moves=sum(m.moves_gained.get(generation, 0) for m in group.members),
        members_touched=len(rereads),
        reread_s_mean=round(statistics.fmean(r[1] for r in rereads), 3) if rereads else 0.0,
        reread_s_max=round(max((r[1] for r in rereads), default=0.0), 3),
        cursors_read=max((r[2] for r in rereads), default=0),
        whole_read_s=round(whole_s, 3),
        whole_read_cursors=len(whole),
        grant_wait_s_max=round(max(waits, default=0.0), 3),
        zk_writes=int(_delta(after, before, "zxid")),
        zk_requests=int(_delta(after, before, "zk_packets_received")),
        server_cpu_s=round(server_cpu, 3),
    )


@dataclass
class WriteCapacity:
    partitions: int
    writers: int
    seconds: float
    transactions_per_s: float  # fenced cursor transactions, one per range and interval
    cursor_writes_per_s: float
    server_cpu_ms_per_transaction: float  # private server only
    server_cpu: float  # cores
    harness_cpu: float  # cores


def measure_write_capacity(
    hosts: str, partitions: int = 64, writers: int = 32, seconds: float = 10.0
) -> WriteCapacity:
    """How many fenced cursor transactions (``partitions`` cursors each, as one range's
    commit) ZooKeeper takes when ``writers`` ranges write back to back, each its own session."""
    from kazoo.client import KazooClient

    from coordinator.cursors import CursorWriter
    from coordinator.layout import GroupLayout
    from coordinator.leases import RangeLeases
    from keyshared.core.slots import split_evenly

    layout = GroupLayout(f"scale-writes-{int(time.time())}", "/keyshared-scale")
    clients = [KazooClient(hosts=hosts, timeout=30.0) for _ in range(writers)]
    for client in clients:
        client.start(timeout=30)
    layout.ensure(clients[0])
    cursor_writes = [0] * writers
    stop = threading.Event()

    def write(index: int, slots: SlotRange) -> None:
        client = clients[index]
        lease = RangeLeases(client, layout, f"writer-{index}").acquire(slots, generation=1)
        writer = CursorWriter(client, layout, lease)
        offset = 0
        while not stop.is_set():
            offset += 100
            for partition in range(partitions):
                writer.stage("scale", partition, offset)
            cursor_writes[index] += writer.flush()

    threads = [
        threading.Thread(target=write, args=(i, slots), daemon=True)
        for i, slots in enumerate(split_evenly(writers))
    ]
    try:
        for thread in threads:
            thread.start()
        time.sleep(1.0)  # leases taken, cursor znodes created
        before, cpu0, harness0 = mntr(hosts), server_cpu_s(hosts), time.process_time()
        began = time.monotonic()
        time.sleep(seconds)
        after, elapsed = mntr(hosts), time.monotonic() - began
        server_cpu = server_cpu_s(hosts) - cpu0
        harness_cpu = time.process_time() - harness0
        stop.set()
        for thread in threads:
            thread.join(30)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            clients[0].delete(layout.root, recursive=True)
        for client in clients:
            with contextlib.suppress(Exception):
                client.stop()
                client.close()
    transactions = _delta(after, before, "zxid")
    return WriteCapacity(
        partitions=partitions,
        writers=writers,
        seconds=round(elapsed, 1),
        transactions_per_s=round(transactions / elapsed, 1),
        cursor_writes_per_s=round(transactions * partitions / elapsed, 1),
        server_cpu_ms_per_transaction=round(1000 * server_cpu / max(1.0, transactions), 3),
        server_cpu=round(server_cpu / elapsed, 3),
        harness_cpu=round(harness_cpu / elapsed, 3),
    )


# -- command line --------------------------------------------------------------------------------


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m keyshared.bench.scale", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--planner-members", type=_sizes, default=[10, 100, 1000])
    parser.add_argument("--planner-events", type=int, default=200)
    parser.add_argument(
        "--fragmentation",
        type=_sizes,
        default=[],
        help="member counts to follow under long churn (ranges only)",
    )
    parser.add_argument("--fragmentation-events", type=int, default=2000)
    parser.add_argument("--members", type=_sizes, default=[10, 100], help="ZooKeeper runs")
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--events", type=int, default=4, help="churn events per ZooKeeper run")
    parser.add_argument("--steady-seconds", type=float, default=10.0)
    parser.add_argument(
        "--write-seconds",
        type=float,
        default=10.0,
        help="ZooKeeper's cursor write capacity, measured this long (0: skip)",
    )
    parser.add_argument("--zookeeper", help="host:port (default: a private server)")
    parser.add_argument("--out", type=Path, default=Path("scale-results.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # sessions closing at the end

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    results: dict[str, Any] = {
        "planner": [],
        "fragmentation": {},
        "zookeeper": [],
        "write_capacity": None,
    }
    for n in args.fragmentation:
        every = max(1, args.fragmentation_events // 10)
        samples = fragmentation(n, args.fragmentation_events, every)
        say(f"fragmentation {n}: {samples}")
        results["fragmentation"][str(n)] = samples
    for n in args.planner_members:
        figures = measure_planner(n, args.planner_events)
        say(f"planner {n}: {asdict(figures)}")
        results["planner"].append(asdict(figures))
    if args.members or args.write_seconds > 0:
        server = contextlib.nullcontext(args.zookeeper) if args.zookeeper else private_zookeeper()
        with server as hosts:
            for n in args.members:
                zk = measure_zookeeper(
                    hosts, n, args.partitions, args.events, args.steady_seconds, say
                )
                results["zookeeper"].append(asdict(zk))
                args.out.write_text(json.dumps(results, indent=2) + "\n")
            if args.write_seconds > 0:
                capacity = measure_write_capacity(
                    hosts, args.partitions, seconds=args.write_seconds
                )
                say(f"write capacity: {asdict(capacity)}")
                results["write_capacity"] = asdict(capacity)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    say(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
