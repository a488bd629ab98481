"""The offset-expiry fault of the topology runs: every partition quiet for longer than the
cluster's offset retention, then the member that worked last killed.

Kafka expires a group's committed offsets ``offsets.retention.minutes`` after their last
commit when it sees the group without members, running or not (KIP-211): ``key_shared`` and
``exclusive`` members only ``assign()``. The topology cluster keeps offsets for a minute
(:data:`~tests.chaos.plan.TOPOLOGY_OFFSET_RETENTION_MIN`). A member that refreshed its unchanged
offsets hourly lost a quiet partition's offset there; the next owner (exclusive mode's next
active member, or a ``key_shared`` leader that joined since) then read the partition again from
``auto.offset.reset``, which the judge counts as unexplained duplicates (or, with ``latest``,
as losses). The spell samples the group's offsets and says in its note which ones went.

The partition modes keep members in the Kafka group, so Kafka keeps their offsets (the fault
then checks nothing more than a quiet group and a kill).
"""

from __future__ import annotations

import time

from keyshared.kafka.offset_retention import RefusedError, read_retention_minutes
from tests.chaos.members import Members, PacedProducer
from tests.chaos.observers import CommitWatch, JournalTail
from tests.chaos.plan import TOPOLOGY_OFFSET_RETENTION_MIN, ChaosPlan, Fault

QUIET_S = TOPOLOGY_OFFSET_RETENTION_MIN * 60 + 15.0
"""The spell: the retention, the broker's check (every 2 s), and a margin."""
SAMPLE_EVERY_S = 2.0


def outlive_retention(
    fault: Fault,
    plan: ChaosPlan,
    producer: PacedProducer,
    members: Members,
    tail: JournalTail,
    watch: CommitWatch,
    resume_share: float,
) -> None:
    """Hold the input back for :data:`QUIET_S`, noting every partition whose committed offset
    went meanwhile; then SIGKILL the member that journaled last (exclusive mode: the active
    one) and start its replacement, and let the input go on up to ``resume_share``.

    A cluster that keeps offsets longer than the spell (an external topology keeps its own
    setting) could expire nothing in it: the spell is then skipped and its note says so, rather
    than reporting "none expired" as if it had been checked."""
    kept = _retention_minutes(watch.bootstrap)
    if kept is None or kept > TOPOLOGY_OFFSET_RETENTION_MIN:
        shown = "unknown" if kept is None else f"{kept:g} min"
        fault.note = f"not checked: the cluster keeps offsets for {shown}, longer than the spell"
        fault.t_fault = fault.t_recovered = time.monotonic_ns()
        return
    producer.allow_until(len(producer.sent_at) / len(producer.records))
    try:
        fault.t_fault = time.monotonic_ns()
        held: dict[int, int] = {}  # partition -> the offset seen committed before it went
        expired: set[int] = set()
        deadline = time.monotonic() + QUIET_S
        while time.monotonic() < deadline:
            for partition, offset in (watch.offsets() or {}).items():
                if offset >= 0:
                    held[partition] = offset
                elif partition in held:
                    expired.add(partition)
            time.sleep(SAMPLE_EVERY_S)  # sampling the broker's state over the spell
        tail.poll()
        victim = members.names_by_pid.get(tail.last_pid)
        if victim not in members.procs:
            victim = sorted(members.procs)[0]
        fault.target = victim
        fault.pid, _ = members.kill(victim)
        members.start(members.slot_of(victim))
        fault.t_recovered = time.monotonic_ns()
    finally:
        producer.allow_until(resume_share)
    went = ", ".join(f"{p}@{held[p]}" for p in sorted(expired)) or "none"
    fault.note = f"quiet {QUIET_S:.0f}s; offsets that expired: {went}; then {victim} killed"
    fault.expired = bool(expired)


def _retention_minutes(bootstrap: str) -> float | None:
    """The cluster's ``offsets.retention.minutes``; None when it cannot be read."""
    try:
        return read_retention_minutes({"bootstrap.servers": bootstrap}, timeout=10.0)
    except (LookupError, RefusedError):
        return None
