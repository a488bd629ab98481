"""The exactly-once output judge on made-up outputs (no server): it must see every duplicate,
missing output and per-key order break, and none in a clean run, or the exactly-once chaos runs
would pass whatever the members wrote."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.chaos.harness import _allowed_until
from tests.chaos.outputs import Output, judge_outputs
from tests.chaos.plan import PRODUCER_FENCE, ChaosPlan, fault_schedule
from tests.kafka.support.journal import RecordId

A, B = b"a", b"b"


def laid_out(records: list[RecordId], partitions: int = 3) -> list[Output]:
    """``records`` as a read_committed reader sees them: each key on one partition, offsets
    in write order."""
    offsets = [0] * partitions
    out = []
    for key, seq in records:
        p = hash(key) % partitions
        out.append((p, offsets[p], (key, seq)))
        offsets[p] += 1
    return out


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[RecordId], set[RecordId]]:
    """Sequenced records of a few keys interleaved at random, and a set dead-lettered."""
    counts = draw(st.lists(st.integers(1, 8), min_size=1, max_size=5))
    queues = [[(f"k{i}".encode(), s) for s in range(1, n + 1)] for i, n in enumerate(counts)]
    order: list[RecordId] = []
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        order.append(queue.pop(0))
    dead = set(draw(st.lists(st.sampled_from(order), max_size=3)))
    return order, dead


@settings(deadline=None)  # a loaded 2-core machine: no per-example time limit
@given(runs())
def test_a_clean_run_is_judged_clean(run: tuple[list[RecordId], set[RecordId]]) -> None:
    order, dead = run
    verdict = judge_outputs(laid_out([r for r in order if r not in dead]), order, dead)
    assert (verdict.duplicates, verdict.losses, verdict.order_breaks) == ([], [], [])
    assert verdict.read == len(order) - len(dead)


@settings(deadline=None)
@given(runs(), st.data())
def test_every_fault_of_the_outputs_is_counted(
    run: tuple[list[RecordId], set[RecordId]], data: st.DataObject
) -> None:
    """Repeat one output, drop one, or move one of a key before an earlier one: each is found
    as what it is, once."""
    order, dead = run
    written = [r for r in order if r not in dead]
    if not written:
        return
    fault = data.draw(st.sampled_from(["duplicate", "loss", "swap"]))
    victim = data.draw(st.sampled_from(written))
    same_key = [r for r in written if r[0] == victim[0]]
    if fault == "duplicate":
        written.insert(written.index(victim) + 1, victim)
    elif fault == "loss":
        written.remove(victim)
    elif len(same_key) > 1:
        i, j = written.index(same_key[0]), written.index(same_key[1])
        written[i], written[j] = written[j], written[i]
    else:
        return
    verdict = judge_outputs(laid_out(written), order, dead)
    found = {
        "duplicate": len(verdict.duplicates),
        "loss": len(verdict.losses),
        "swap": len(verdict.order_breaks),
    }
    assert found == {name: int(name == fault) for name in found}


def test_an_output_of_a_dead_lettered_record_is_a_loss_of_exactly_once() -> None:
    verdict = judge_outputs(laid_out([(A, 1), (A, 2)]), [(A, 1), (A, 2)], {(A, 2)})
    assert verdict.losses == ["(b'a', 2): dead-lettered and also output"]


def test_order_is_judged_per_key_across_partitions() -> None:
    """Two keys on two partitions, read one partition after the other: no break."""
    outputs = [(0, 0, (A, 1)), (0, 1, (A, 2)), (1, 0, (B, 1)), (1, 1, (B, 2))]
    verdict = judge_outputs(outputs, [(B, 1), (A, 1), (B, 2), (A, 2)], set())
    assert (verdict.duplicates, verdict.losses, verdict.order_breaks) == ([], [], [])


def test_exactly_once_plans_and_their_fence() -> None:
    plan = ChaosPlan("partition_leases", exactly_once=True, fences_at=(0.3,))
    fences = [f for f in fault_schedule(plan) if f.kind == PRODUCER_FENCE]
    assert [f.at for f in fences] == [0.3 * plan.fault_seconds]
    # the fence adds a fault without moving the others: the at-least-once schedule is kept
    others = [(f.kind, f.at) for f in fault_schedule(plan) if f.kind != PRODUCER_FENCE]
    assert others == [(f.kind, f.at) for f in fault_schedule(ChaosPlan("partition_leases"))]
    with pytest.raises(ValueError, match="exactly_once needs a mode"):
        ChaosPlan("key_shared", exactly_once=True)
    with pytest.raises(ValueError, match="needs exactly_once"):
        ChaosPlan("partition", fences_at=(0.5,))


def test_a_fence_lets_records_flow_until_the_member_transacts() -> None:
    """A fenced member notices only at its next transaction: while the fault waits for that,
    the topology plans' producer must not have run dry at the next fault's time (the member
    would idle and the fence look unnoticed), so a fence lets records through one fault
    further than any other fault does."""
    plan = ChaosPlan("partition_leases", exactly_once=True, fences_at=(0.1,))
    faults = fault_schedule(plan)
    k = next(i for i, f in enumerate(faults) if f.kind == PRODUCER_FENCE)
    assert _allowed_until(faults, k, plan.fault_seconds) == faults[k + 2].at / plan.fault_seconds
    assert _allowed_until(faults, k - 1, plan.fault_seconds) == faults[k].at / plan.fault_seconds
    assert _allowed_until(faults, len(faults) - 1, plan.fault_seconds) == 1.0
