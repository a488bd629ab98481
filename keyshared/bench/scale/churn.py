"""One churn event in a simulated group (a member joins, or a non-leader leaves), measured from
the event until every member settled: the generation written, seen, leases granted, cursors
re-read, and what it cost ZooKeeper.

Apart from :mod:`.measure` so that a run's steps (form, churn, steady state) each stay small;
:func:`wait_for` is the polling both use.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from keyshared.bench.scale.members import SimGroup
from keyshared.bench.scale.zookeeper_stats import delta, mntr, server_cpu_s

__all__ = ["EventFigures", "churn", "owners", "wait_for"]


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


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"scale: {what} did not happen within {timeout:.0f} s")
        time.sleep(0.02)


def owners(group: SimGroup) -> int:
    from coordinator.assignment import read_assignment

    admin = group.members[0]
    return len(read_assignment(admin.client, admin.layout).assignment.members)


def churn(group: SimGroup, joining: bool, rng: random.Random, timeout: float) -> EventFigures:
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
    wait_for(lambda: group.generation() > before_gen, timeout, "the next generation")
    generation = group.generation()
    wait_for(lambda: group.settled(generation), timeout, f"settling generation {generation}")
    settled_at = max(m.settled.get(generation, t0) for m in group.members)
    seen_at = max(m.seen.get(generation, t0) for m in group.members)
    after = mntr(hosts)
    server_cpu = server_cpu_s(hosts) - cpu0
    rereads = [r for m in group.members for r in m.rereads if r[0] == generation]
    began = time.monotonic()  # one member's whole-group read, alone (a key_shared member's re-read)
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
        zk_writes=int(delta(after, before, "zxid")),
        zk_requests=int(delta(after, before, "zk_packets_received")),
        server_cpu_s=round(server_cpu, 3),
    )
