"""``rebalance``: what a member joining and leaving costs, against plain consumers doing the same.

Records arrive at a steady rate below every contender's capacity (so no backlog hides the
hand-over). Member A consumes the 6 partitions alone; B joins; later B leaves. From the log of
finished records: *join to first record* (B's first record after it started), *join to steady
state* (the last moved partition's first record at its new owner: from then on every partition
has exactly one owner), *leave to take-over* (A's first record of a partition B gave back), the
*drain* time of A's revoke (keyshared's drain histogram) and B's *stop* time (drain and final
commit).
The same timeline with plain confluent-kafka consumers (cooperative-sticky) is the baseline.
A record of a moved partition handled by the old owner after the new owner started it would be
an ownership overlap; the scenario counts them (keyshared drains first, so: 0).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from prometheus_client import REGISTRY

from keyshared.bench.context import BenchContext
from keyshared.bench.members import Event, Member, PlainMember, ThreadedMember
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.bench.workload import SteadyProducer

__all__ = ["run_rebalance"]

PARTITIONS = 6


def _timeline(
    make: Callable[[str, list[Event]], Member],
    phase_s: float,
    drain_of: Callable[[str], float] | None = None,
) -> dict[str, float]:
    """Run A alone, A+B, A alone again; ``drain_of(A)`` is read before A stops."""
    log: list[Event] = []
    suffix = uuid.uuid4().hex[:6]
    a, b = make(f"bench-a-{suffix}", log), make(f"bench-b-{suffix}", log)
    a.start()
    _wait(lambda: bool(log), 60)
    time.sleep(phase_s)
    t_join = time.monotonic()
    b.start()
    _wait(lambda: any(m == b.name for _, m, _ in log), 60)
    time.sleep(phase_s)
    t_leave = time.monotonic()
    b_stop = b.stop()
    moved = {p for t, m, p in log if m == b.name}
    _wait(lambda: moved <= {p for t, m, p in log if m == a.name and t > t_leave}, 60)
    time.sleep(0.2)
    revoke_drain = drain_of(a.name) if drain_of is not None else 0.0
    a.stop()
    first_b = {p: min(t for t, m, q in log if m == b.name and q == p) for p in moved}
    overlap = sum(1 for t, m, p in log if m == a.name and p in moved and first_b[p] < t < t_leave)
    takeover = {
        p: min(t for t, m, q in log if m == a.name and q == p and t > t_leave) for p in moved
    }
    figures = {
        "join_to_first_record_s": min(first_b.values()) - t_join,
        "join_to_steady_s": max(first_b.values()) - t_join,
        "leave_to_takeover_s": max(takeover.values()) - t_leave,
        "leaver_stop_s": b_stop,
        "moved_partitions": len(moved),
        "ownership_overlaps": overlap,
        "records": len(log),
        "revoke_drain_s": revoke_drain,
    }
    return figures


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("rebalance scenario: the group did not reach the expected state")
        time.sleep(0.02)


def _mean_drain(group: str, member: str) -> float:
    """Mean of the member's drain histogram (its series vanish when it stops: read before)."""
    labels = {"group": group, "member": member}
    total = REGISTRY.get_sample_value("keyshared_drain_duration_seconds_sum", labels) or 0.0
    count = REGISTRY.get_sample_value("keyshared_drain_duration_seconds_count", labels) or 0.0
    return total / count if count else 0.0


@register("rebalance", "member join/leave: time to steady state and drain times vs plain")
def run_rebalance(ctx: BenchContext) -> ScenarioResult:
    workers = ctx.workers or 8
    handler_s = (ctx.handler_ms if ctx.handler_ms is not None else 5.0) / 1000
    phase_s = ctx.size(3.0, 1.0)
    # Below a plain member's capacity (1/L per member), so neither side builds a backlog.
    rate = ctx.records or 150
    result = ScenarioResult(
        "rebalance",
        "a member joins then leaves a group under steady traffic: keyshared vs plain consumers",
        {
            "partitions": PARTITIONS,
            "records_per_second": rate,
            "workers_per_member": workers,
            "handler_ms": handler_s * 1000,
            "phase_seconds": phase_s,
        },
    )
    figures: dict[str, dict[str, float]] = {}
    for kind in ("plain", "keyshared"):
        topic = ctx.new_topic(f"reb-{kind}", PARTITIONS)
        producer = SteadyProducer(ctx.bootstrap, topic, rate, 600)
        producer.start()
        group = ctx.new_group(f"reb-{kind}")
        ctx.say(f"rebalance: {kind} members on {topic}")

        def make(
            name: str, log: list[Event], kind: str = kind, topic: str = topic, group: str = group
        ) -> Member:
            if kind == "plain":
                return PlainMember(name, ctx.bootstrap, group, topic, handler_s, log)
            return ThreadedMember(name, ctx.bootstrap, group, topic, handler_s, workers, log)

        drain_of = (
            (lambda member, group=group: _mean_drain(group, member))
            if kind == "keyshared"
            else None
        )
        try:
            figures[kind] = _timeline(make, phase_s, drain_of)
        finally:
            producer.stop()
    for name in (
        "join_to_first_record_s",
        "join_to_steady_s",
        "leave_to_takeover_s",
        "leaver_stop_s",
    ):
        for kind in ("keyshared", "plain"):
            result.add(
                Measurement(
                    f"{kind}: {name[:-2].replace('_', ' ')}",
                    kind="measured",
                    value=figures[kind][name],
                    unit="s",
                )
            )
        result.ratio(
            f"keyshared_vs_plain_{name[:-2]}", figures["keyshared"][name], figures["plain"][name]
        )
    result.add(
        Measurement(
            "keyshared: revoke drain (mean)",
            kind="measured",
            value=figures["keyshared"]["revoke_drain_s"],
            unit="s",
        )
    )
    result.ratios["keyshared_ownership_overlaps"] = figures["keyshared"]["ownership_overlaps"]
    result.ratios["plain_ownership_overlaps"] = figures["plain"]["ownership_overlaps"]
    result.params["moved_partitions"] = figures["keyshared"]["moved_partitions"]
    result.notes.append("ratios are keyshared seconds / plain seconds: below 1 is faster")
    result.notes.append(
        f"revoke drain {figures['keyshared']['revoke_drain_s'] * 1000:.2f} ms: a drain waits only "
        "for the revoked partitions' records in flight, so it is bounded by the slowest handler"
    )
    return result
