"""The rewind fault: the input topic deleted and created again under the running group while a
record waits out its retry backoff.

Why: an operator who recreates a topic (or an unclean leader election that truncates a log)
sends every member's fetch back below what its window took in. The product starts such a
partition again from the new log (``keyshared/kafka/rewinds.py``; in the partition modes the
group also revokes the deleted topic's partitions and assigns them again): the old window's
running calls end, and a record waiting out a retry backoff counts as running and is withdrawn,
never run in the new log, which does not have it. The component tests (``tests/kafka/
test_rewinds.py``, ``tests/coordinator/test_topic_lifecycle.py``) check this on a quiet group;
here it happens amid member kills, node faults and rebalances.

How: the fault waits (bounded) until a member journals the failed first attempt of a record that
a retry would finish (not a poison one), then at once holds the producer until what it sent is
acknowledged, deletes the topic, waits until the brokers no longer know it, creates it again as
the harness did (:func:`create_input_topic`) and lets a fresh producer go on. The members run
with a retry backoff of ``ChaosPlan.retry_backoff`` (several seconds), so the record still waits
when the fetch goes back.

How it is judged (:func:`judge_rewinds`, called by ``analysis.analyse``):

- the records produced into the old log that never finished (no end, not dead-lettered) were
  deleted by the operator's act: not lost, counted and reported ("deleted with the topic");
- a key's records are that key's finished old-log prefix followed by its new-log records: the
  per-key order check skips the deleted ones (a gap in the sequence at the rewind is no
  overtake), and every record produced after the deletion must finish (lost otherwise);
- a record that waited out its backoff in a live member at the deletion must never run again:
  the fault's record starting again is a finding (:attr:`ChaosResult.rewind_reruns`). Other
  old-log records may still start after the deletion (a member's window goes on with what it
  had taken in until its fetch goes back); they are counted, not judged.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from keyshared.dev.topics import create_topic, delete_topics
from tests.chaos.members import Members, PacedProducer
from tests.chaos.observers import JournalTail
from tests.chaos.plan import QUIET, TOPIC_REWIND, ChaosPlan, Fault
from tests.chaos.result import ChaosResult
from tests.kafka.support.journal import Event, RecordId, wait_for

FAILURE_WAIT_S = 60.0
"""How long the fault waits for a first attempt to fail (about 1 in 300 records does)."""
TOPIC_WAIT_S = 60.0
"""Bound on each step of the recreation: the producer's acknowledgements, the deletion, the
creation (a rolling restart's broker may still be catching up)."""


def create_input_topic(admin: AdminClient, topic: str, plan: ChaosPlan) -> None:
    """The input topic as every run creates it, and as the rewind creates it again: the plan's
    partitions, the brokers' default replication factor (3 with ``min.insync.replicas`` 2 on
    the topology cluster), no topic configs of its own."""
    create_topic(admin, topic, plan.partitions, replication_factor=-1)


def recreate_under_backoff(
    fault: Fault,
    plan: ChaosPlan,
    producer: PacedProducer,
    members: Members,
    tail: JournalTail,
    topic: str,
    resume_share: float,
) -> None:
    """Wait for a first attempt to fail, then delete ``topic`` and create it again while that
    record waits out its backoff; the producer goes on with a new client up to
    ``resume_share``. ``fault.t_fault``: the deletion asked; ``t_recovered``: the topic back."""
    seen = len(tail.first_failures)
    deadline = time.monotonic() + FAILURE_WAIT_S
    failure: Event | None = None
    while failure is None:
        tail.poll()
        live = {pid for pid, name in members.names_by_pid.items() if name in members.procs}
        failure = next(
            (f for f in tail.first_failures[seen:]
             if f.pid in live and not plan.poison(f.key, f.seq)),
            None,
        )  # fmt: skip
        if failure is None:
            if time.monotonic() > deadline:
                fault.t_fault = fault.t_recovered = time.monotonic_ns()
                fault.note = f"not injected: no first attempt failed within {FAILURE_WAIT_S:.0f}s"
                return
            time.sleep(0.02)  # the journal has no notification: polling it
    admin = AdminClient({"bootstrap.servers": members.bootstrap, "log_level": QUIET})
    producer.allow_until(len(producer.sent_at) / len(producer.records))
    try:
        wait_for(
            lambda: (
                producer.holding.is_set()
                and producer.delivered + len(producer.errors) >= len(producer.sent_at)
            ),
            TOPIC_WAIT_S,
            "the producer to stop with everything it sent acknowledged",
            interval=0.05,
        )
        fault.t_fault = time.monotonic_ns()
        fault.record = (failure.key, failure.seq)
        fault.target = members.names_by_pid.get(failure.pid, str(failure.pid))
        fault.pid = failure.pid
        delete_topics(admin, [topic], timeout=TOPIC_WAIT_S)
        wait_for(lambda: _gone(admin, topic), TOPIC_WAIT_S, f"{topic} to be deleted", 0.05)
        wait_for(
            lambda: _created(admin, topic, plan), TOPIC_WAIT_S, f"{topic} to be created again", 0.05
        )
        producer.renew()
        fault.t_recovered = time.monotonic_ns()
    finally:
        producer.allow_until(resume_share)
    waited = (fault.t_fault - failure.t) / 1e9
    key = failure.key.decode(errors="replace") if failure.key is not None else None
    fault.note = (
        f"{key} seq {failure.seq} (partition {failure.partition} offset {failure.offset}) "
        f"in its backoff: failed {waited:.2f}s before the deletion, topic back "
        f"{(fault.t_recovered - failure.t) / 1e9:.2f}s after the failure "
        f"(backoff {plan.retry_backoff}s)"
    )


def _gone(admin: AdminClient, topic: str) -> bool:
    try:
        found = admin.list_topics(topic=topic, timeout=5.0).topics.get(topic)
    except KafkaException:
        return False
    return found is None or found.error is not None


def _created(admin: AdminClient, topic: str, plan: ChaosPlan) -> bool:
    try:
        create_input_topic(admin, topic, plan)
    except KafkaException:
        return False  # the deletion is still under way on a broker (TOPIC_ALREADY_EXISTS)
    return True


# -- the judge ---------------------------------------------------------------------------------


def deleted_records(
    faults: Iterable[Fault],
    sent_at: Mapping[RecordId, int],
    processed: set[RecordId],
) -> set[RecordId]:
    """The records the rewinds deleted: produced before a deletion, never processed (no end,
    not read back from the DLQ)."""
    deletions = [f.t_fault for f in faults if f.kind == TOPIC_REWIND and f.t_recovered]
    if not deletions:
        return set()
    last = max(deletions)
    return {rid for rid, t in sent_at.items() if t < last and rid not in processed}


def skipped_by_key(deleted: Iterable[RecordId]) -> dict[bytes | None, frozenset[int]]:
    """The deleted sequence numbers of each key, as the order check takes them."""
    by_key: dict[bytes | None, set[int]] = defaultdict(set)
    for key, seq in deleted:
        by_key[key].add(seq)
    return {key: frozenset(seqs) for key, seqs in by_key.items()}


def judge_rewinds(
    events: list[Event],
    plan: ChaosPlan,
    result: ChaosResult,
    sent_at: Mapping[RecordId, int],
    killed: Mapping[int, int],
) -> None:
    """The rewind rules on the raw timeline (before any other rule takes calls out of it).

    A finding: the fault's record (its first attempt failed just before the deletion, in a
    member alive then) starting again after the deletion, in any member. Counted, not judged:
    the other records waiting out a backoff at the deletion in a live member, and how many of
    them started again (one whose partition a rebalance had moved before the deletion may
    legitimately run from the new owner's window); and the old log's records that started a
    first attempt after the deletion (a window goes on with what it had taken in until its
    fetch goes back). The fault's note says what became of its record."""
    for fault in result.faults:
        if fault.kind != TOPIC_REWIND or not fault.t_recovered or fault.record is None:
            continue
        t = fault.t_fault
        last: dict[tuple[int, RecordId], Event] = {}
        for event in events:
            if event.t < t:
                last[(event.pid, (event.key, event.seq))] = event
        waiting = {
            rid
            for (pid, rid), event in last.items()
            if event.kind == "F" and event.attempt < plan.max_attempts and killed.get(pid, t) >= t
        } - {fault.record}
        result.rewind_backoffs += len(waiting) + 1
        restarted: dict[RecordId, Event] = {}
        for event in events:
            if event.kind != "S" or event.t <= t:
                continue
            rid = (event.key, event.seq)
            if rid == fault.record:
                result.rewind_reruns.append(
                    f"{rid!r} waited out its backoff at the deletion (t="
                    f"{(t - result.t0) / 1e9:.2f}s) and started again in pid {event.pid} at "
                    f"t={(event.t - result.t0) / 1e9:.2f}s, attempt {event.attempt}"
                )
            elif rid in waiting:
                restarted.setdefault(rid, event)
            elif event.attempt == 1 and sent_at.get(rid, t) < t:
                result.rewind_old_starts += 1
        failed_at = {rid: e.t for (_, rid), e in last.items() if rid in restarted}
        result.rewind_backoff_restarts += [
            f"{rid!r} failed {(t - failed_at[rid]) / 1e9:.2f}s before the deletion, started "
            f"again {(event.t - t) / 1e9:.2f}s after it in pid {event.pid} (attempt "
            f"{event.attempt}, partition {event.partition} offset {event.offset})"
            for rid, event in restarted.items()
        ]
        rerun = any(line.startswith(repr(fault.record)) for line in result.rewind_reruns)
        fault.note += "; it STARTED AGAIN" if rerun else "; it never ran again"
