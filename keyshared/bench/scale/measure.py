"""A whole ZooKeeper run: N simulated members form a group, churn, then hold a steady state of
commit rounds; :class:`ZooKeeperFigures` is what the run reports, and :func:`verify` is the
consistency the group must show at rest (every slot owned once, one lease per range, every
cursor there).

The run's parts live beside it: the members in :mod:`.members`, one churn event in
:mod:`.churn`, the server's counters in :mod:`.zookeeper_stats`.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from keyshared.bench.scale.churn import EventFigures, churn, owners, wait_for
from keyshared.bench.scale.members import SimGroup
from keyshared.bench.scale.planner import check_assignment
from keyshared.bench.scale.zookeeper_stats import delta, mntr, server_cpu_s
from keyshared.core.slots import SlotMap

__all__ = ["ZooKeeperFigures", "measure_zookeeper", "verify"]


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
    steady_cursor_transactions_per_s: float  # the members' cursor multis
    cursor_transactions_per_member_round: float  # per member per commit interval: 1 at most
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


def measure_zookeeper(
    hosts: str,
    members: int,
    partitions: int = 64,
    events: int = 4,
    steady_s: float = 10.0,
    say: Callable[[str], None] = lambda _text: None,
    reread_all: bool = False,
) -> ZooKeeperFigures:
    """``members`` simulated members on the ZooKeeper at ``hosts``: form the group, run the
    commit rounds for ``steady_s``, then ``events`` churn events (join, leave, ...).

    :param reread_all: members re-read every cursor of the group, as key_shared members once
        did, instead of only those overlapping the ranges they hold, as they do; each event
        also times one whole-group read by one member.
    """
    from coordinator.assignment import read_assignment
    from coordinator.cursors import read_cursors

    group = SimGroup(hosts, members, partitions, reread_all)
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
            return gen > 0 and group.settled(gen) and owners(group) == members

        wait_for(formed, timeout, "forming the group")
        form_s = time.monotonic() - began
        say(f"formed in {form_s:.1f} s (generation {group.generation()})")
        # Churn first, so that the steady state after it has the ranges churn leaves.
        rng = random.Random(27)
        churned: list[EventFigures] = []
        for index in range(events):
            group.commit_round()  # what the rounds and the leader's pass would have done
            group.watermark_pass()
            churned.append(churn(group, index % 2 == 0, rng, timeout))
            say(f"event {index}: {asdict(churned[-1])}")
        group.rounds, group.passes, group.cursor_writes = [], [], 0
        group.cursor_transactions = 0
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
        held = verify(group, snapshot.assignment, len(cursors))
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
            steady_writes_per_s=round(delta(after, before, "zxid") / elapsed, 1),
            steady_cursor_ops_per_s=round(group.cursor_writes / elapsed, 1),
            steady_cursor_transactions_per_s=round(group.cursor_transactions / elapsed, 1),
            cursor_transactions_per_member_round=round(
                group.cursor_transactions / max(1, len(group.rounds) * members), 3
            ),
            steady_requests_per_s=round(delta(after, before, "zk_packets_received") / elapsed, 1),
            steady_server_cpu=round(server_cpu / elapsed, 3),
            steady_harness_cpu=round(harness_cpu / elapsed, 3),
            server_cpu_ms_per_write=round(
                1000 * server_cpu / max(1.0, delta(after, before, "zxid")), 3
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


def verify(group: SimGroup, assignment: SlotMap, cursors: int) -> int:
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
