"""Fences: the moments after which a member's results for some partitions no longer count
(its session expired in a stall, or the group took partitions from it), read from its log."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from tests.chaos.members import Members
from tests.chaos.plan import EXPIRED_LOG, Fault


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


def log_time(members: Members, name: str, text: str, clock_offset_ns: int) -> int:
    """The journal-clock time of the last log line of ``name`` containing ``text``."""
    lines = [line for line in members.log(name).splitlines() if text in line]
    return parse_log_time(lines[-1], clock_offset_ns)


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


def fences_from_logs(members: Members, clock_offset_ns: int) -> list[Fence]:
    """``lost`` partitions from the members' logs (the consumer logs each with its time)."""
    fences = []
    for pid, name in members.names_by_pid.items():
        for line in members.log(name).splitlines():
            if "keyshared.kafka.poll_loop: lost " not in line:
                continue
            t = parse_log_time(line, clock_offset_ns)
            partitions = frozenset(int(p) for p in re.findall(r"\[(\d+)\]", line))
            fences.append(Fence(pid, t, t, partitions, "lost"))
    return fences


def unexpected_expiries(members: Members, faults: list[Fault], clock_offset_ns: int) -> list[str]:
    """Members whose ZooKeeper session expired other than in a stall meant to expire it.

    A ZooKeeper ensemble that keeps its quorum keeps every session: kazoo moves to another
    member within the session timeout, and the session moves with it. An expiry there fences
    a healthy member (its leases and ranges go, its results are discarded).
    """
    stalls = {(f.target, f.pid) for f in faults if f.kind == "member_stall"}
    found = []
    for pid, name in members.names_by_pid.items():
        lines = [line for line in members.log(name).splitlines() if EXPIRED_LOG in line]
        if (name, pid) in stalls:
            lines = lines[1:]  # the stall's own expiry
        found += [f"{name}: {line[:23]} (t={parse_log_time(line, clock_offset_ns)})"
                  for line in lines]  # fmt: skip
    return found
