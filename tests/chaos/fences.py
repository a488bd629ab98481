"""Fences: the moments after which a member's results for some partitions no longer count
(its session expired in a stall, or the group took partitions from it), read from its log."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from tests.chaos.members import Members
from tests.chaos.plan import ENSEMBLE_FAULTS, EXPIRED_LOG, LINK_FAULTS, Fault


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


def parse_log_time(line: str, clock_offset_ns: int) -> int:
    stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return int(stamp.timestamp() * 1e9) - clock_offset_ns


def log_time(members: Members, name: str, text: str, clock_offset_ns: int, after: int = 0) -> int:
    """The journal-clock time of the first log line of ``name`` containing ``text`` at or after
    ``after`` (a member's session may expire again later in a run: finding 20)."""
    times = [
        parse_log_time(line, clock_offset_ns)
        for line in members.log(name).splitlines()
        if text in line
    ]
    return next((t for t in times if t >= after), times[-1])


@dataclass(frozen=True)
class Handover:
    """A process took a partition's lease and resumes it from ``offset`` (None: nothing was
    committed, so from the start): from ``t`` on, whatever the previous holder finished at or
    above ``offset`` is bound to be redone, however late the new holder reaches it."""

    pid: int
    t: int
    partition: int
    offset: int | None


HANDOVER = re.compile(r"\[(\d+)\]: lease held \(token \d+\), dispatching from (\S+)")


def handovers_from_logs(members: Members, clock_offset_ns: int) -> list[Handover]:
    """Every partition lease taken (``--partition-leases``), from the members' logs."""
    handovers = []
    for pid, name in members.names_by_pid.items():
        for line in members.log(name).splitlines():
            found = HANDOVER.search(line)
            if found is None:
                continue
            offset = None if found[2] == "None" else int(found[2])
            t = parse_log_time(line, clock_offset_ns)
            handovers.append(Handover(pid, t, int(found[1]), offset))
    return sorted(handovers, key=lambda h: h.t)


LOG_SLACK_NS = 3_000_000
"""How far a log line's time may be from the journal's: log times are cut to the millisecond,
and the wall clock is mapped to the journal's monotonic one once per run."""
LOST_LOG = "keyshared.kafka.poll_loop: lost "
ASSIGNED_LOG = "keyshared.kafka.poll_loop: assigned "
# An exactly-once member redoes the partitions of a failed transaction "as if lost and assigned
# again": the poll loop logs that redo with LOST_LOG too, right after one of these (the abort
# may take a transactional call's timeout, 30 s). No broker cut it off, and it is no loss to the
# group: its fence has the cause "redo".
REDO_AFTER = ("keyshared.kafka.transactions: transaction failed",
              "keyshared.kafka.transactions: abort_transaction failed")  # fmt: skip
REDO_WITHIN_NS = 35_000_000_000
NEVER = 2**63 - 1


def fences_from_logs(members: Members, clock_offset_ns: int) -> list[Fence]:
    """``lost`` partitions from the members' logs (the consumer logs each with its time, once
    nothing of them can start any more), one fence per partition. The process runs a lost
    partition as a new member only from its next assignment of it on (the poll loop's
    ``assigned`` line): a start between the loss and that assignment is not a new member's
    but a defect of the old one (``lost_starts`` in analysis.py)."""
    fences = []
    for pid, name in members.names_by_pid.items():
        lines = members.log(name).splitlines()
        failed_at: int | None = None  # the last failed transaction not yet followed by a loss
        for i, line in enumerate(lines):
            if any(marker in line for marker in REDO_AFTER):
                failed_at = parse_log_time(line, clock_offset_ns)
                continue
            if ASSIGNED_LOG in line:
                failed_at = None
            if LOST_LOG not in line:
                continue
            t = parse_log_time(line, clock_offset_ns)
            redo = failed_at is not None and t - failed_at <= REDO_WITHIN_NS
            failed_at = None
            for partition in {int(p) for p in re.findall(r"\[(\d+)\]", line)}:
                again = next(
                    (
                        parse_log_time(later, clock_offset_ns) - LOG_SLACK_NS
                        for later in lines[i + 1 :]
                        if ASSIGNED_LOG in later and f"[{partition}]@" in later
                    ),
                    NEVER,
                )
                cause = "redo" if redo else "lost"
                fences.append(Fence(pid, t, again, frozenset({partition}), cause))
    return fences


SUSPENDED_LOG = "ZooKeeper session suspended"


def session_expiries(
    members: Members, faults: list[Fault], clock_offset_ns: int
) -> list[tuple[str, Fence]]:
    """Every ZooKeeper session expiry the members logged, except a stall's own, each as a fence
    and its member's name.

    A member learns of an expiry only when it reconnects; it stopped dispatching when its
    connection dropped (``session suspended``: the gate pauses), and calls it had started keep
    running, as in a stall: the fence is that drop, and after the expiry line the member
    rejoins as a new one.
    """
    stalls = {(f.target, f.pid): f.t_fault for f in faults if f.kind == "member_stall"}
    found = []
    for pid, name in members.names_by_pid.items():
        stalled_at = stalls.get((name, pid))
        suspended = 0
        for line in members.log(name).splitlines():
            if SUSPENDED_LOG in line:
                suspended = parse_log_time(line, clock_offset_ns)
            elif EXPIRED_LOG in line:
                t = parse_log_time(line, clock_offset_ns)
                if stalled_at is not None and t >= stalled_at:
                    stalled_at = None  # the stall's own expiry, judged as the stall
                    continue
                found.append((name, Fence(pid, suspended or t, t, None, "expired")))
    return found


LINK_SLACK_NS = 1_500_000_000
"""How long after a link fault ended a member may still lose its connection to it: its last
delayed messages are still on their way. Shorter than the gap between faults (FAULT_GAP_S),
so that the next fault's connection losses are not this one's."""


def unexpected_expiries(
    expiries: list[tuple[str, Fence]], faults: list[Fault], session_timeout_s: float
) -> list[str]:
    """The expiries during a ZooKeeper ensemble member's crash (up to a session timeout after
    it was back): there the ensemble keeps its quorum, kazoo moves to another member within the
    session timeout and the session moves with it, so such an expiry fences a healthy member.
    The same during a link fault (up to ``LINK_SLACK_NS`` after it): a latency below kazoo's
    read timeout or a reply lost on a dropped connection costs a member at most a connection,
    which it resumes within the session. Expiries elsewhere (a member starved of CPU, an
    ensemble that lost its quorum under load) are fences like any other
    (:func:`session_expiries`) and only reported."""
    window = int((session_timeout_s + 2.0) * 1e9)
    ensemble = [(f.t_fault, f.t_recovered + window) for f in faults if f.kind in ENSEMBLE_FAULTS]
    ensemble += [
        (f.t_fault, max(f.t_fault, f.t_recovered) + LINK_SLACK_NS)
        for f in faults
        if f.kind in LINK_FAULTS and f.t_fault
    ]
    # Judged by when the member lost its connection (the fence), not by when it logged the
    # expiry: a member cut off by an ensemble that had already lost its quorum before the crash
    # was not cut off by the crash.
    return [
        f"{name}: connection lost at t={fence.t}, session expired at t={fence.t_resume}"
        for name, fence in expiries
        if any(lo <= fence.t <= hi for lo, hi in ensemble)
    ]
