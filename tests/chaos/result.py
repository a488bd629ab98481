"""What a chaos run found, and its report."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.fences import Handover
from tests.chaos.observers import GroupStates
from tests.chaos.outputs import OutputVerdict
from tests.chaos.plan import TOPIC_REWIND, ChaosPlan, Fault
from tests.kafka.support.journal import (
    RecordId,
)

# -- the result --------------------------------------------------------------------------------


@dataclass
class ChaosResult:
    plan: ChaosPlan
    faults: list[Fault]
    t0: int
    produced: int = 0
    elapsed_s: float = 0.0
    processed: int = 0  # records finished by a handler or read back from the DLQ
    lost: list[RecordId] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    duplicates: list[RecordId] = field(default_factory=list)
    unexplained_duplicates: list[str] = field(default_factory=list)
    calls: int = 0
    retried: int = 0  # failed attempts followed by another attempt
    dead_letters: int = 0  # distinct records in the DLQ
    dlq_copies: int = 0  # DLQ entries beyond one per record (rewritten after a crash)
    dlq_problems: list[str] = field(default_factory=list)
    cut_off_starts: list[str] = field(default_factory=list)  # see _drop_cut_off_starts
    zombie_starts: list[str] = field(default_factory=list)  # see _drop_zombie_starts
    # started on waking by a worker that had passed its last liveness check before the stop
    decided_before_stop: list[str] = field(default_factory=list)  # see _drop_zombie_starts
    lost_starts: list[str] = field(default_factory=list)  # see _drop_starts_after_a_loss
    zombie_calls: int = 0  # calls of a stalled or fenced member that outlived its fence
    lost_partition_zombies: int = 0  # of them: calls running when the group took a partition
    lost_partition_duplicates: int = 0  # redone after a member lost a partition
    late_commit_duplicates: int = 0  # not committed at a kill, though finished well before it
    retry_restarts: int = 0  # records whose retry count a re-dispatch reset in one process
    exclusive_overlaps: list[str] = field(default_factory=list)
    verify_exit: int | None = None
    verify_problems: list[str] = field(default_factory=list)
    verify_dead_letters: int = 0
    exit_codes: dict[str, int] = field(default_factory=dict)
    logs: Path | None = None
    group_states: GroupStates | None = None
    handovers: list[Handover] = field(default_factory=list)  # partition leases taken
    rebalance_duplicates: int = 0  # the group rebalanced from their finish to their redo
    handover_bounded: int = 0  # of them: up to their partition's hand-over, not their redo
    # the group rebalanced from their finish to their member's kill, uncommitted at the kill
    killed_in_rebalance_duplicates: int = 0
    # sessions expired during a ZooKeeper member's crash (the ensemble kept its quorum: none may)
    unexpected_expiries: list[str] = field(default_factory=list)
    # every session expiry other than a stall's (fences, judged like a stall's)
    other_expiries: list[str] = field(default_factory=list)
    # the producer held back by the schedule (topology runs): no key can finish a record that
    # was not produced, so convergence does not count these stretches
    producer_pauses: list[tuple[int, int]] = field(default_factory=list)
    # topic rewinds (tests/chaos/rewind_fault.py): old-log records never finished, deleted
    # with the topic (not lost); starts of the fault's record after the deletion (findings);
    # records waiting out a backoff at a deletion, how many of the others started again; and
    # first attempts of old-log records after a deletion
    deleted_with_topic: list[RecordId] = field(default_factory=list)
    rewind_reruns: list[str] = field(default_factory=list)
    rewind_backoffs: int = 0
    rewind_backoff_restarts: list[str] = field(default_factory=list)
    rewind_old_starts: int = 0
    # exactly-once runs: the output topic read back with read_committed, judged
    outputs: OutputVerdict | None = None

    @property
    def in_flight(self) -> int:
        return sum(f.in_flight for f in self.faults if f.kind in ("member_kill", "member_stall"))

    @property
    def at_risk(self) -> int:
        return sum(f.at_risk for f in self.faults if f.kind in ("member_kill", "member_stall"))

    def report(self) -> str:
        plan = self.plan
        kinds: dict[str, int] = defaultdict(int)
        for fault in self.faults:
            kinds[fault.kind] += 1
        lines = [
            f"== chaos run: mode={plan.mode} members={plan.members} "
            f"partitions={plan.partitions} keys={plan.keys} seed={plan.seed} "
            f"group.protocol={plan.group_protocol}",
            f"records produced {self.produced}, fault phase {plan.fault_seconds:.0f}s, "
            f"run {self.elapsed_s:.0f}s; handler calls {self.calls}, retried attempts "
            f"{self.retried}",
            "faults: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())),
        ]
        for fault in self.faults:
            figures = ""
            if fault.kind in ("member_kill", "member_stall"):
                figures = f" in flight {fault.in_flight}, at risk {fault.at_risk};"
            if fault.committed is not None:
                figures += f" redone (uncommitted at the kill) {fault.redone_uncommitted};"
            if fault.converged_s is not None:
                figures += (
                    f" {fault.affected_keys} affected keys resumed after "
                    f"{fault.resumed_s:.2f}s, all after {fault.converged_s:.2f}s"
                )
            elif fault.affected_keys == 0:
                figures += " no key affected"
            lines.append(f"  {fault.describe(self.t0)}:{figures}")
            if fault.committed is not None:
                lines.append(
                    "    committed at the kill: "
                    + ", ".join(
                        f"[{p}]@{cursor}+{len(done)}"
                        for p, (cursor, done) in sorted(fault.committed.items())
                    )
                )
        converged = [f.converged_s for f in self.faults if f.converged_s is not None]
        lines += [
            f"lost: {len(self.lost)}  (processed {self.processed} of {self.produced}, "
            f"of them {self.dead_letters} read back from the DLQ, {self.dlq_copies} extra DLQ "
            f"copies)",
            f"per-key overtakes/overlaps: {len(self.violations)}",
            f"duplicates: {len(self.duplicates)}  vs in flight at a crash/stall "
            f"{self.in_flight}, at risk (in flight or started within a commit window before) "
            f"{self.at_risk}; unexplained {len(self.unexplained_duplicates)}",
            f"  redone because not committed at a kill: "
            f"{sum(f.redone_uncommitted for f in self.faults)}, of them finished more than a "
            f"commit window before the kill {self.late_commit_duplicates}",
            f"  redone because the group rebalanced from their finish to their hand-over (commits "
            f"refused): {self.rebalance_duplicates}, of them up to a partition lease's hand-over "
            f"(the redo came later) {self.handover_bounded}",
            f"  redone because their member was killed (or stalled past its session) before "
            f"the group's rebalance ended (commits held back; uncommitted at the kill): "
            f"{self.killed_in_rebalance_duplicates}",
            f"zombie calls (still running when their member's session or partition was gone; "
            f"the documented exception): {self.zombie_calls}, of them after a lost partition "
            f"{self.lost_partition_zombies}; duplicates after a lost partition or expired session "
            f"{self.lost_partition_duplicates}",
            f"calls started by a stalled member after its SIGCONT, before it noticed the "
            f"expiry: {len(self.zombie_starts)}; decided before its stop (a worker's first "
            f"line on waking; the documented exception) {len(self.decided_before_stop)}",
            f"calls started on a partition after it was logged lost, before it was assigned "
            f"again: {len(self.lost_starts)}",
            f"calls started by a member cut off from the broker, before it learned its partition "
            f"was lost (plain partition mode, documented): {len(self.cut_off_starts)}",
            f"retry counts restarted by a re-dispatch in the same process: {self.retry_restarts}",
            f"ZooKeeper sessions expired outside a stall: {len(self.other_expiries)} "
            f"{self.other_expiries[:3]}; of them during an ensemble member's crash or a link "
            f"fault "
            f"{len(self.unexpected_expiries)}",
            f"convergence after a fault: max {max(converged, default=0):.2f}s, "
            f"median {sorted(converged)[len(converged) // 2] if converged else 0:.2f}s",
            f"keyshared verify: exit {self.verify_exit}, problems {self.verify_problems[:3]}, "
            f"dead letters {self.verify_dead_letters}",
        ]
        if any(f.kind == TOPIC_REWIND for f in self.faults):
            lines.append(
                f"topic rewinds: deleted with the topic: {len(self.deleted_with_topic)} (old-log "
                f"records never finished, not lost); in a retry backoff at a deletion "
                f"{self.rewind_backoffs}, the fault's record started again "
                f"{len(self.rewind_reruns)}, others started again "
                f"{len(self.rewind_backoff_restarts)}; "
                f"old-log first attempts after a deletion {self.rewind_old_starts}"
            )
        if self.outputs is not None:
            out = self.outputs
            lines.append(
                f"exactly-once outputs (read_committed): read {out.read}, duplicates "
                f"{len(out.duplicates)}, losses {len(out.losses)}, per-key order breaks "
                f"{len(out.order_breaks)}, partitions not read to their end {out.unread}"
            )
            for what, found in (("duplicates", out.duplicates), ("losses", out.losses),
                                ("order breaks", out.order_breaks)):  # fmt: skip
                if found:
                    lines.append(f"first output {what}: {found[:5]}")
        if self.violations:
            lines.append(f"first violations: {self.violations[:5]}")
        if self.unexplained_duplicates:
            lines.append(f"first unexplained duplicates: {self.unexplained_duplicates[:5]}")
        if self.zombie_starts:
            lines.append(f"first zombie starts: {self.zombie_starts[:3]}")
        if self.decided_before_stop:
            lines.append(f"starts decided before a stop: {self.decided_before_stop[:3]}")
        if self.lost_starts:
            lines.append(f"first starts after a loss: {self.lost_starts[:3]}")
        if self.dlq_problems:
            lines.append(f"DLQ problems: {self.dlq_problems[:5]}")
        if self.rewind_reruns:
            lines.append(f"records run again after a rewind: {self.rewind_reruns[:5]}")
        if self.rewind_backoff_restarts:
            lines.append(
                f"other records in a backoff at a deletion that ran again (before their "
                f"member's fetch went back, or from a new owner's window): "
                f"{self.rewind_backoff_restarts[:5]}"
            )
        if self.exclusive_overlaps:
            lines.append(f"exclusive overlaps: {self.exclusive_overlaps[:5]}")
        return "\n".join(lines)
