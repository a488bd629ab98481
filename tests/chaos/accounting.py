"""Duplicates and convergence: every record redone tied to the fault that caused it, and how
long the group took to resume after each fault."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from tests.chaos.fences import Fence
from tests.chaos.plan import SERVER_FAULTS, ChaosPlan, Fault
from tests.chaos.result import ChaosResult
from tests.kafka.support.journal import (
    Event,
    RecordId,
)

COMMIT_ROUND_TRIP_S = 2.0
"""A commit's round trip on a loaded machine (an at-least-once ``commit()`` of offsets)."""
TRANSACTION_S = 6.0
"""An exactly-once commit's transaction on a loaded machine: produce the outputs (acks from
every in-sync replica), add the offsets to the transaction, commit it (markers on every
partition it touched). Measured on the 30-minute plain-partition run on the three-broker
topology (2026-11-29): at the 52 kills of a stable group that left the victim with finished
records not yet committed, the oldest such record had finished 1.28 s before the kill at the
median, 2.76 s at the 90th percentile and 5.59 s at most; with 2 s, 960 redos of two kills
(finished 2.26-2.89 s before them, on a stable group, no transaction failed) read as
unexplained."""


def commit_window_ns(plan: ChaosPlan) -> int:
    """How long before a crash a finished record may still be uncommitted: a commit interval
    plus a commit's round trip (an exactly-once member's: a whole transaction)."""
    round_trip = TRANSACTION_S if plan.exactly_once else COMMIT_ROUND_TRIP_S
    return int((plan.commit_interval + round_trip) * 1e9)


@dataclass(frozen=True)
class Call:
    """One handler call on the merged timeline (a killed process's open call ends at the kill)."""

    pid: int
    rid: RecordId
    start: int
    end: int
    kind: str  # how it ended: E finished (or dead-lettered), F failed, K killed or stalled
    partition: int = -1
    offset: int = -1


def calls_of(events: list[Event], killed: Mapping[int, int]) -> list[Call]:
    """Pair every start with its end, in start order."""
    open_starts: dict[tuple[int, RecordId], Event] = {}
    calls = []
    for event in sorted(events, key=lambda e: (e.t, e.kind == "S")):
        rid = (event.key, event.seq)
        if event.kind == "S":
            open_starts[(event.pid, rid)] = event
            continue
        start = open_starts.pop((event.pid, rid), None)
        if start is not None:
            calls.append(
                Call(event.pid, rid, start.t, event.t, event.kind, start.partition, start.offset)
            )
    for (pid, rid), start in open_starts.items():
        if pid in killed:
            calls.append(Call(pid, rid, start.t, killed[pid], "K", start.partition, start.offset))
    return sorted(calls, key=lambda c: c.start)


def account_duplicates(
    calls: list[Call], result: ChaosResult, fences: list[Fence], plan: ChaosPlan
) -> None:
    """In-flight figures per member fault, and every duplicate tied to a fault (or not).

    A member fault puts at risk the calls of the victim that were open at the fault or finished
    within a commit window before it (finished, but maybe not committed yet), however long
    before that window they started. A duplicate is
    explained if its first finished run is such a call, or ran around a server restart (a
    broker or ZooKeeper outage can cost a member its partitions or leases before it commits).
    """
    window = commit_window_ns(plan)
    by_pid: dict[int, list[Call]] = defaultdict(list)
    first_finish: dict[RecordId, Call] = {}
    for call in calls:
        by_pid[call.pid].append(call)
        if call.kind == "E" and call.rid not in first_finish:
            first_finish[call.rid] = call
    at_risk: set[tuple[int, RecordId]] = set()
    for fault in result.faults:
        if fault.kind not in ("member_kill", "member_stall"):
            continue
        pid = fault.pid
        for call in by_pid[pid]:
            running = call.start <= fault.t_fault <= call.end
            fault.in_flight += running
            if running or fault.t_fault - window <= call.end <= fault.t_fault:
                fault.at_risk += 1
                at_risk.add((pid, call.rid))
    server_faults = [f for f in result.faults if f.kind in SERVER_FAULTS]
    # A kill, or a stall that cost the member its session (frozen, then fenced: what it had
    # not committed at the SIGSTOP is redone, as at a kill), each with the commits read then.
    ends: dict[int, list[Fault]] = defaultdict(list)
    for f in sorted(result.faults, key=lambda f: f.t_fault):
        if f.committed and (f.kind == "member_kill" or (f.kind == "member_stall" and f.expired)):
            ends[f.pid].append(f)
    redo_start: dict[RecordId, int] = {}
    for call in calls:  # in start order: the first call after a record's first finish
        done = first_finish.get(call.rid)
        if done is not None and call.start > done.end and call.rid not in redo_start:
            redo_start[call.rid] = call.start
    states = result.group_states
    for rid in result.duplicates:
        first = first_finish[rid]
        kill = next((f for f in ends[first.pid] if f.t_fault >= first.end), None)
        uncommitted_at_kill = False
        if kill is not None and kill.committed is not None:
            # Exact: a new owner resumes from what the victim had committed when it died.
            cursor, finished = kill.committed.get(first.partition, (0, frozenset()))
            if first.offset >= cursor and first.offset not in finished:
                uncommitted_at_kill = True
                kill.redone_uncommitted += 1
                result.late_commit_duplicates += (first.pid, rid) not in at_risk
        if (first.pid, rid) in at_risk:
            continue
        # The group took its partitions, or its ZooKeeper session expired (fenced: what it
        # finished but had not written to a cursor is discarded and redone), or (exactly-once,
        # exclusive mode) the active role's producer was fenced and the member gave the role up.
        if any(
            f.cause in ("lost", "redo", "expired", "fenced")
            and f.covers(first.pid, first.partition)
            and first.end <= f.t_resume
            for f in fences
        ):
            result.lost_partition_duplicates += 1
            continue
        if any(
            f.t_fault - window <= first.end and first.start <= f.t_recovered + window
            for f in server_faults
        ):
            continue
        # With Kafka's classic group protocol a member's commits are refused while its group
        # rebalances (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS), revoke commits included: a
        # record finished then and handed over (or its member killed) before the group was
        # stable for a commit window is redone. Judged from the coordinator's own state, up to
        # the redo or, with partition leases, up to the moment another process took the
        # partition from below the record (the redo is then decided, however late a slow key
        # lets the new holder reach it).
        redo = redo_start.get(rid)
        if (
            states is not None
            and redo is not None
            and states.longest_stable(first.end, _decided(first, redo, result)) * 1e9 < window
        ):
            result.rebalance_duplicates += 1
            result.handover_bounded += states.longest_stable(first.end, redo) * 1e9 >= window
            continue
        # The same, when the member died (or was stalled past its session) before the
        # rebalance ended: a member waiting in the
        # rebalance (its JoinGroup held by the coordinator until every member rejoined or timed
        # out) gets no commit through, so what it finished then is lost with it, however late
        # the new owner comes to redo it (a slow key's records wait for the key's earlier
        # ones). Bounded by the kill, and only for records the commits read right after the
        # kill show uncommitted: a redo of a record the victim had committed is still a finding.
        if (
            states is not None
            and kill is not None
            and uncommitted_at_kill
            and redo is not None
            and first.end <= kill.t_fault < redo
            and states.longest_stable(first.end, kill.t_fault) * 1e9 < window
        ):
            result.killed_in_rebalance_duplicates += 1
            continue
        result.unexplained_duplicates.append(
            f"{rid!r}: first finished by pid {first.pid} at "
            f"t={(first.end - result.t0) / 1e9:.2f}s, redone from "
            f"t={((redo or 0) - result.t0) / 1e9:.2f}s"
        )


def _decided(first: Call, redo: int, result: ChaosResult) -> int:
    """When a record's redo became certain: its redo, or the first later hand-over of its
    partition to another process that resumes at or below it, whichever came first."""
    for handover in result.handovers:  # in time order
        if handover.t >= redo:
            break
        if (
            handover.t > first.end
            and handover.pid != first.pid
            and handover.partition == first.partition
            and (handover.offset is None or handover.offset <= first.offset)
        ):
            return handover.t
    return redo


def measure_convergence(calls: list[Call], result: ChaosResult) -> None:
    """Per fault: the keys it affected, and how long until each finished a record again.

    Affected keys: for a member fault, those the victim was running at the fault or had
    finished within the second before; for a server restart, every key finished within the
    second before. Keys that finish nothing after the fault (all their records were done) are
    left out. The figure includes the wait for a key's next record to arrive, but not the
    stretches in which the schedule held the producer back (``result.producer_pauses``).
    """
    second = 1_000_000_000
    finishes: dict[bytes | None, list[int]] = defaultdict(list)
    for call in calls:
        if call.kind == "E":
            finishes[call.rid[0]].append(call.end)
    for times in finishes.values():
        times.sort()
    ends = sorted((c for c in calls if c.kind == "E"), key=lambda c: c.end)
    end_times = [c.end for c in ends]
    by_pid: dict[int, list[Call]] = defaultdict(list)
    for call in calls:
        by_pid[call.pid].append(call)
    for fault in result.faults:
        t = fault.t_fault
        if fault.kind in ("member_kill", "member_stall"):
            affected = {
                c.rid[0]
                for c in by_pid[fault.pid]
                if c.start <= t <= c.end or (c.kind == "E" and t - second <= c.end <= t)
            }
        else:
            lo, hi = bisect.bisect_left(end_times, t - second), bisect.bisect_right(end_times, t)
            affected = {c.rid[0] for c in ends[lo:hi]}
        delays = []
        for key in affected:
            times = finishes[key]
            i = bisect.bisect_right(times, t)
            if i < len(times):
                held = sum(
                    max(0, min(hi, times[i]) - max(lo, t)) for lo, hi in result.producer_pauses
                )
                delays.append((times[i] - t - held) / 1e9)
        fault.affected_keys = len(delays)
        if delays:
            fault.resumed_s, fault.converged_s = min(delays), max(delays)
