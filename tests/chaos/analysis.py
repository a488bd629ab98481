"""The judgement of a chaos run: order, completeness, duplicates and convergence from the
merged journals, the faults, the fences and the DLQ read back."""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from tests.chaos.members import Members
from tests.chaos.observers import DeadLetter
from tests.chaos.plan import ZOMBIE_PID_BASE, ChaosPlan, Fault
from tests.chaos.result import ChaosResult
from tests.kafka.support.journal import (
    Event,
    RecordId,
    check,
)

# -- the judgement -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fence:
    """A moment after which a process's results for some partitions are discarded and someone
    else may run them: its session expired during a stall (every partition), or the Kafka group
    took partitions from it (``lost``, e.g. when a broker outage outlasted
    ``session.timeout.ms``). Calls open at ``t`` are zombies: they end at ``t``; after
    ``t_resume`` the process runs those partitions as a new member."""

    pid: int
    t: int
    t_resume: int
    partitions: frozenset[int] | None  # None: all
    cause: str

    def covers(self, pid: int, partition: int) -> bool:
        return pid == self.pid and (self.partitions is None or partition in self.partitions)


def analyse(
    events: list[Event],
    plan: ChaosPlan,
    expected: Mapping[bytes | None, int],
    killed: Mapping[int, int],
    dead: Iterable[DeadLetter],
    result: ChaosResult,
    fences: Iterable[Fence] = (),
) -> ChaosResult:
    """Fill ``result`` from the journal events, the faults, the fences and the DLQ read back."""
    fences = [
        *fences,
        *(
            Fence(f.pid, f.t_fault, f.t_recovered, None, "stall")
            for f in result.faults
            if f.kind == "member_stall" and f.expired
        ),
    ]
    events = sorted(events, key=lambda e: (e.t, e.kind == "S"))
    events, result.zombie_starts = _drop_zombie_starts(events, result.faults)
    if plan.mode == "partition":
        events, result.cut_off_starts = _drop_cut_off_starts(events, fences, result.faults)
    events, zombies = _end_fenced_calls(events, fences)
    result.zombie_calls = sum(zombies.values())
    result.lost_partition_zombies = zombies.get("lost", 0)
    poison = {(k, s) for k, n in expected.items() for s in range(1, n + 1) if plan.poison(k, s)}
    # The consumer counts attempts per dispatch: its last one is followed by the DLQ write.
    judged = [
        replace(e, kind="E")
        if e.kind == "F" and (e.key, e.seq) in poison and e.attempt >= plan.max_attempts
        else e
        for e in events
    ]
    judged, result.retry_restarts = _count_attempts_across_redispatch(judged)
    incarnations, incarnation_kills = _incarnations(judged, fences, killed)
    report = check(incarnations, expected, killed={**killed, **incarnation_kills})
    result.violations = report.violations
    result.calls = report.calls
    result.duplicates = report.duplicate_ids
    result.retried = sum(1 for e in judged if e.kind == "F")

    letters = list(dead)
    in_dlq: dict[RecordId, int] = defaultdict(int)
    for letter in letters:
        in_dlq[(letter.key, letter.seq)] += 1
        if letter.reason != "exhausted" or letter.attempts != plan.max_attempts:
            result.dlq_problems.append(f"{letter}: expected reason exhausted after "
                                       f"{plan.max_attempts} attempts")  # fmt: skip
        if "InjectedFailure" not in letter.error_class or "injected" not in letter.error_message:
            result.dlq_problems.append(f"{letter}: the handler's error is not recorded")
    result.dead_letters = len(in_dlq)
    result.dlq_copies = len(letters) - len(in_dlq)
    unexpected = set(in_dlq) - poison
    if unexpected:
        result.dlq_problems.append(f"dead-lettered but never poison: {sorted(unexpected)[:5]}")
    handled = {(e.key, e.seq) for e in events if e.kind == "E"}
    processed = handled | set(in_dlq)
    result.processed = len(processed & {(k, s) for k, n in expected.items()
                                        for s in range(1, n + 1)})  # fmt: skip
    result.lost = [
        (k, s) for k, n in expected.items() for s in range(1, n + 1) if (k, s) not in processed
    ]
    calls = calls_of(judged, killed)
    _account_duplicates(calls, result, fences, plan)
    _convergence(calls, result)
    if plan.mode == "exclusive":
        from tests.coordinator.test_exclusive_mode import overlaps

        result.exclusive_overlaps = overlaps(judged, dict(killed))
    return result


def _drop_cut_off_starts(
    events: list[Event], fences: list[Fence], faults: list[Fault]
) -> tuple[list[Event], list[str]]:
    """Plain partition mode only: calls a member *started* on a partition between a broker
    outage and the moment librdkafka told it the partition was lost. A member cut off from the
    broker longer than ``session.timeout.ms`` has been evicted, but learns it only when it
    reaches the broker again; for that moment it dispatches records the group has given to
    another member. That is the documented gap of partition mode without leases (guarantees.md,
    "What is not guaranteed"); partition leases close it, and their runs are judged without
    this rule. These calls are listed and taken out of the timeline."""
    outages = sorted(f.t_fault for f in faults if f.kind == "broker_restart")
    windows = []
    for fence in fences:
        if fence.cause != "lost":
            continue
        began = [t for t in outages if t < fence.t]
        if began:
            windows.append((fence, began[-1]))
    if not windows:
        return events, []
    dropped: set[tuple[int, bytes | None, int]] = set()
    found = []
    out = []
    for event in events:
        call = (event.pid, event.key, event.seq)
        if event.kind == "S" and any(
            fence.covers(event.pid, event.partition) and lo <= event.t <= fence.t
            for fence, lo in windows
        ):
            dropped.add(call)
            found.append(f"pid {event.pid} started {event.key!r} seq {event.seq} "
                         f"(partition {event.partition} offset {event.offset}) after a broker "
                         f"outage, before it learned the partition was lost")  # fmt: skip
            continue
        if event.kind != "S" and call in dropped:
            dropped.discard(call)
            continue
        out.append(event)
    return out, found


def _drop_zombie_starts(events: list[Event], faults: list[Fault]) -> tuple[list[Event], list[str]]:
    """Calls a stalled member *started* after its SIGCONT and before it noticed that its session
    had expired. Unlike a call frozen mid-way, nothing excuses these (the member dispatches
    records it no longer owns, which the new owner may have done already); they are listed
    and taken out of the timeline, so that the rest is judged on its own."""
    windows = [
        (f.pid, f.t_recovered, f.t_noticed)
        for f in faults
        if f.kind == "member_stall" and f.expired
    ]
    if not windows:
        return events, []
    dropped: set[tuple[int, bytes | None, int]] = set()
    found = []
    out = []
    for event in events:
        call = (event.pid, event.key, event.seq)
        if event.kind == "S" and any(
            pid == event.pid and lo <= event.t <= hi for pid, lo, hi in windows
        ):
            dropped.add(call)
            found.append(f"pid {event.pid} started {event.key!r} seq {event.seq} "
                         f"(partition {event.partition} offset {event.offset}) after its "
                         f"SIGCONT, before it noticed its session had expired")  # fmt: skip
            continue
        if event.kind != "S" and call in dropped:
            dropped.discard(call)
            continue
        out.append(event)
    return out, found


def _end_fenced_calls(
    events: list[Event], fences: list[Fence]
) -> tuple[list[Event], dict[str, int]]:
    """Calls open at a fence end there (``K``: ended, not finished). Returns the events and the
    number of such zombie calls by cause."""
    if not fences:
        return events, {}
    fenced = {f.pid for f in fences}
    starts: dict[tuple[int, bytes | None, int], Event] = {}
    out: list[Event] = []
    zombies: dict[str, int] = defaultdict(int)
    for event in events:
        if event.pid not in fenced:
            out.append(event)
            continue
        call = (event.pid, event.key, event.seq)
        if event.kind == "S":
            starts[call] = event
            out.append(event)
            continue
        start = starts.pop(call, None)
        fence = None
        if start is not None:
            fence = next(
                (f for f in fences if f.covers(event.pid, event.partition)
                 and start.t < f.t < event.t),
                None,
            )  # fmt: skip
        if fence is not None:
            zombies[fence.cause] += 1
            out.append(replace(event, kind="K", t=fence.t))
        else:
            out.append(event)
    return sorted(out, key=lambda e: (e.t, e.kind == "S")), dict(zombies)


def _incarnations(
    events: list[Event], fences: list[Fence], killed: Mapping[int, int]
) -> tuple[list[Event], dict[int, int]]:
    """Events with a fenced process's later events under a new id per fence (it rejoined as a
    new member), and the kill time of every such id whose process was killed."""
    if not fences:
        return events, {}
    ids: dict[tuple[int, int, int], int] = {}

    def incarnation(pid: int, partition: int, t: int) -> int:
        generation = sum(1 for f in fences if f.covers(pid, partition) and t >= f.t_resume)
        if generation == 0:
            return pid
        return ids.setdefault((pid, partition, generation), ZOMBIE_PID_BASE * (len(ids) + 1))

    starts: dict[tuple[int, bytes | None, int], int] = {}
    out = []
    for event in events:
        call = (event.pid, event.key, event.seq)
        if event.kind == "S":
            starts[call] = event.t
            t = event.t
        else:
            t = starts.pop(call, event.t)  # an end belongs to its start's incarnation
        out.append(replace(event, pid=incarnation(event.pid, event.partition, t)))
    kills = {synthetic: killed[pid] for (pid, _, _), synthetic in ids.items() if pid in killed}
    return out, kills


def _parse_log_time(line: str, clock_offset_ns: int) -> int:
    stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return int(stamp.timestamp() * 1e9) - clock_offset_ns


def _log_time(members: Members, name: str, text: str, clock_offset_ns: int) -> int:
    """The journal-clock time of the last log line of ``name`` containing ``text``."""
    lines = [line for line in members.log(name).splitlines() if text in line]
    return _parse_log_time(lines[-1], clock_offset_ns)


def fences_from_logs(members: Members, clock_offset_ns: int) -> list[Fence]:
    """``lost`` partitions from the members' logs (the consumer logs each with its time)."""
    fences = []
    for pid, name in members.names_by_pid.items():
        for line in members.log(name).splitlines():
            if "keyshared.kafka.poll_loop: lost " not in line:
                continue
            t = _parse_log_time(line, clock_offset_ns)
            partitions = frozenset(int(p) for p in re.findall(r"\[(\d+)\]", line))
            fences.append(Fence(pid, t, t, partitions, "lost"))
    return fences


def _count_attempts_across_redispatch(events: list[Event]) -> tuple[list[Event], int]:
    """Number attempts per process across re-dispatches of an unfinished record.

    A member-wide hand-over (key_shared) or a re-read re-dispatches a record that was waiting
    for its retry with its attempt count back at 1. That is a retry, not a replay: the record
    never finished. Its later attempts are renumbered to continue the count, so the order
    checker's replay rule (a process never starts a key's record again at attempt 1) keeps
    meaning "never re-runs a finished record". Returns the events and how many records had
    their count restarted.
    """
    attempts: dict[tuple[int, bytes | None, int], int] = {}
    finished: set[tuple[int, bytes | None, int]] = set()
    restarted: set[tuple[int, bytes | None, int]] = set()
    out = []
    for event in sorted(events, key=lambda e: (e.t, e.kind == "S")):
        call = (event.pid, event.key, event.seq)
        if event.kind == "S":
            previous = attempts.get(call)
            if previous is not None and call not in finished and event.attempt <= previous:
                restarted.add(call)
                event = replace(event, attempt=previous + 1)
            attempts[call] = event.attempt
        else:
            if call in attempts:
                event = replace(event, attempt=attempts[call])
            if event.kind == "E":
                finished.add(call)
        out.append(event)
    return out, len(restarted)


def _commit_window_ns(plan: ChaosPlan) -> int:
    """How long before a crash a finished record may still be uncommitted: a commit interval
    plus a commit's round trip on a loaded machine."""
    return int((plan.commit_interval + 2.0) * 1e9)


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


def _account_duplicates(
    calls: list[Call], result: ChaosResult, fences: list[Fence], plan: ChaosPlan
) -> None:
    """In-flight figures per member fault, and every duplicate tied to a fault (or not).

    A member fault puts at risk the calls of the victim that were open at the fault or started
    within a commit window before it (finished, but maybe not committed yet). A duplicate is
    explained if its first finished run is such a call, or ran around a server restart (a
    broker or ZooKeeper outage can cost a member its partitions or leases before it commits).
    """
    window = _commit_window_ns(plan)
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
            if running or fault.t_fault - window <= call.start <= fault.t_fault:
                fault.at_risk += 1
                at_risk.add((pid, call.rid))
    server_faults = [f for f in result.faults if f.kind in ("broker_restart", "zookeeper_restart")]
    kills = {f.pid: f for f in result.faults if f.kind == "member_kill" and f.committed}
    redo_start: dict[RecordId, int] = {}
    for call in calls:  # in start order: the first call after a record's first finish
        done = first_finish.get(call.rid)
        if done is not None and call.start > done.end and call.rid not in redo_start:
            redo_start[call.rid] = call.start
    states = result.group_states
    for rid in result.duplicates:
        first = first_finish[rid]
        kill = kills.get(first.pid)
        if kill is not None and kill.committed is not None:
            # Exact: a new owner resumes from what the victim had committed when it died.
            cursor, finished = kill.committed.get(first.partition, (0, frozenset()))
            if first.offset >= cursor and first.offset not in finished:
                kill.redone_uncommitted += 1
                result.late_commit_duplicates += (first.pid, rid) not in at_risk
        if (first.pid, rid) in at_risk:
            continue
        if any(f.cause == "lost" and f.pid == first.pid and first.end <= f.t for f in fences):
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
        # stable for a commit window is redone. Judged from the coordinator's own state.
        redo = redo_start.get(rid)
        if (
            states is not None
            and redo is not None
            and states.longest_stable(first.end, redo) * 1e9 < window
        ):
            result.rebalance_duplicates += 1
            continue
        result.unexplained_duplicates.append(
            f"{rid!r}: first finished by pid {first.pid} at "
            f"t={(first.end - result.t0) / 1e9:.2f}s, redone from "
            f"t={((redo or 0) - result.t0) / 1e9:.2f}s"
        )


def _convergence(calls: list[Call], result: ChaosResult) -> None:
    """Per fault: the keys it affected, and how long until each finished a record again.

    Affected keys: for a member fault, those the victim was running at the fault or had
    finished within the second before; for a server restart, every key finished within the
    second before. Keys that finish nothing after the fault (all their records were done) are
    left out. The figure includes the wait for a key's next record to arrive.
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
                delays.append((times[i] - t) / 1e9)
        fault.affected_keys = len(delays)
        if delays:
            fault.resumed_s, fault.converged_s = min(delays), max(delays)
