"""The judgement of a chaos run: order, completeness, duplicates and convergence from the
merged journals, the faults, the fences and the DLQ read back."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from tests.chaos.accounting import account_duplicates, calls_of, measure_convergence
from tests.chaos.fences import LOG_SLACK_NS, Fence
from tests.chaos.observers import DeadLetter
from tests.chaos.plan import BROKER_FAULTS, KAFKA_SESSION_MS, ZOMBIE_PID_BASE, ChaosPlan, Fault
from tests.chaos.result import ChaosResult
from tests.chaos.rewind_fault import deleted_records, judge_rewinds, skipped_by_key
from tests.kafka.support.journal import (
    Event,
    RecordId,
    check,
)

# How long after an outage ends a member may still learn that the group took a partition from it:
# a session timeout for the coordinator to give up on it, and slack for the loss to reach the
# poll loop's callback (a transactional call in progress may take its 30 s timeout first).
CUT_OFF_NOTICE_NS = (KAFKA_SESSION_MS + 30_000) * 1_000_000


def analyse(
    events: list[Event],
    plan: ChaosPlan,
    expected: Mapping[bytes | None, int],
    killed: Mapping[int, int],
    dead: Iterable[DeadLetter],
    result: ChaosResult,
    fences: Iterable[Fence] = (),
    sent_at: Mapping[RecordId, int] | None = None,
) -> ChaosResult:
    """Fill ``result`` from the journal events, the faults, the fences and the DLQ read back.

    :param sent_at: when each record was produced (the producer's clock, the journals'): which
        records a topic rewind deleted (``tests/chaos/rewind_fault.py``)."""
    fences = [
        *fences,
        *(
            Fence(f.pid, f.t_fault, f.t_recovered, None, "stall")
            for f in result.faults
            if f.kind == "member_stall" and f.expired
        ),
    ]
    events = sorted(events, key=lambda e: (e.t, e.kind == "S"))
    # What ran to its end, before any rule below takes a call out of the order check: a call
    # excused there still processed its record.
    ended = {(e.key, e.seq) for e in events if e.kind == "E"}
    letters = list(dead)
    # Records of a topic's old log that never finished were deleted with it: not lost, and
    # skipped by the order check (see rewind_fault.py); judged on the raw timeline.
    judge_rewinds(events, plan, result, sent_at or {}, killed)
    deleted = deleted_records(
        result.faults, sent_at or {}, ended | {(letter.key, letter.seq) for letter in letters}
    )
    result.deleted_with_topic = sorted(deleted, key=repr)
    events, result.zombie_starts, result.decided_before_stop = _drop_zombie_starts(
        events, result.faults
    )
    events, result.lost_starts = _drop_starts_after_a_loss(events, fences)
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
    report = check(
        incarnations,
        expected,
        killed={**killed, **incarnation_kills},
        skipped=skipped_by_key(deleted),
    )
    result.violations = report.violations
    result.calls = report.calls
    result.duplicates = report.duplicate_ids
    result.retried = sum(1 for e in judged if e.kind == "F")

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
    processed = ended | set(in_dlq)
    result.processed = len(processed & {(k, s) for k, n in expected.items()
                                        for s in range(1, n + 1)})  # fmt: skip
    result.lost = [
        (k, s)
        for k, n in expected.items()
        for s in range(1, n + 1)
        if (k, s) not in processed and (k, s) not in deleted
    ]
    calls = calls_of(judged, killed)
    account_duplicates(calls, result, fences, plan)
    measure_convergence(calls, result)
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
    this rule. These calls are listed and taken out of the timeline.

    The window ends where :func:`_drop_starts_after_a_loss`'s begins, ``LOG_SLACK_NS`` after
    the log line: a start journaled within the log's precision of the line (the line has
    milliseconds) is one of the last before it. Ending at the line itself left a gap that
    judged such a start alone, its predecessors taken out, as an overtake (a CI run: the
    start 10 us after the line's millisecond).

    The window is bounded on both sides by what can cut a member off. It opens at the outage's
    start, or at the member's last assignment of the partition if that came later (a member the
    group assigned the partition to was talking to it). It opens only for an outage the loss can
    follow: one that began before the line and ended (``t_recovered``) at most
    ``CUT_OFF_NOTICE_NS`` before it; a member learns of its eviction within a session timeout of
    reaching the broker again, plus a rebalance. A loss long after every outage has another
    cause and excuses nothing."""
    outages = sorted(
        (f.t_fault, max(f.t_recovered, f.t_fault)) for f in faults if f.kind in BROKER_FAULTS
    )
    windows = []
    for fence in fences:
        if fence.cause != "lost":
            continue
        began = [
            start for start, ended in outages
            if start < fence.t and fence.t - ended <= CUT_OFF_NOTICE_NS
        ]  # fmt: skip
        if not began:
            continue
        reassigned = [
            f.t_resume for f in fences
            if f.pid == fence.pid and f.partitions == fence.partitions and f.t_resume < fence.t
        ]  # fmt: skip
        windows.append((fence, max([began[-1], *reassigned])))
    return _drop_starts(
        events,
        lambda e: any(
            fence.covers(e.pid, e.partition) and lo <= e.t <= fence.t + LOG_SLACK_NS
            for fence, lo in windows
        ),
        "after a broker outage, before it learned the partition was lost",
    )


def _drop_zombie_starts(
    events: list[Event], faults: list[Fault]
) -> tuple[list[Event], list[str], list[str]]:
    """Calls a stalled member *started* after its SIGCONT and before it noticed that its session
    had expired: the events without them, the ones nothing excuses, and the ones decided before
    the stop. All are listed and taken out of the timeline, so that the rest is judged on its
    own.

    - **Decided before the stop** (the documented exception, a zombie call): a worker that had
      passed ``RecordExecutor.prepare``'s last liveness check when the SIGSTOP landed calls the
      handler on waking; no check can close that window (fencing tokens cover it). Its start is
      the first line its thread journals after the stop (finding 18). Only the first: any later
      start of that thread, or a start after another line of it, was decided after the resume.
    - **Nothing excuses the others**: the member dispatched records it no longer owns, which
      the new owner may have done already.

    The window opens at the stop, not at the harness's stamp of the SIGCONT: a stopped process
    journals nothing, and on a loaded machine the resumed member has journaled a start before
    the harness thread got to stamp the signal it had just sent (finding 18)."""
    windows = [
        (f.pid, f.t_fault + 1, f.t_noticed)
        for f in faults
        if f.kind == "member_stall" and f.expired
    ]
    # The first line each thread of a stalled process journaled after its stop.
    first_after_stop: set[Event] = set()
    seen: set[tuple[int, int, int]] = set()
    for event in events:
        for pid, lo, _hi in windows:
            if pid == event.pid and event.t >= lo and (pid, lo, event.thread) not in seen:
                seen.add((pid, lo, event.thread))
                if event.thread:  # 0: a journal without threads, nothing to tell by
                    first_after_stop.add(event)

    def in_window(e: Event) -> bool:
        return any(pid == e.pid and lo <= e.t <= hi for pid, lo, hi in windows)

    events, decided = _drop_starts(
        events,
        lambda e: e in first_after_stop and in_window(e),
        "after its SIGCONT, decided before its stop (the thread's first line after it)",
    )
    events, wrong = _drop_starts(
        events,
        in_window,
        "after its SIGCONT, before it noticed its session had expired",
    )
    return events, wrong, decided


def _drop_starts_after_a_loss(
    events: list[Event], fences: list[Fence]
) -> tuple[list[Event], list[str]]:
    """Calls a member started on a partition after it logged the partition lost and before the
    group gave it back (``fences_from_logs``). The poll loop logs a loss once nothing of the
    partition can start, so there should be none; listed and taken out of the timeline. Starts
    within the logs' precision of the line (``LOG_SLACK_NS``) are the last ones before it."""
    windows = [
        (f, f.t + LOG_SLACK_NS, f.t_resume) for f in fences if f.cause in ("lost", "redo")
    ]  # fmt: skip
    return _drop_starts(
        events,
        lambda e: any(f.covers(e.pid, e.partition) and lo < e.t < hi for f, lo, hi in windows),
        "after it logged the partition lost, before it was assigned again",
    )


def _drop_starts(
    events: list[Event], wrong: Callable[[Event], bool], why: str
) -> tuple[list[Event], list[str]]:
    """The timeline without the calls whose start ``wrong`` picks, and a line for each."""
    dropped: set[tuple[int, bytes | None, int]] = set()
    found = []
    out = []
    for event in events:
        call = (event.pid, event.key, event.seq)
        if event.kind == "S" and wrong(event):
            dropped.add(call)
            found.append(f"pid {event.pid} started {event.key!r} seq {event.seq} "
                         f"(partition {event.partition} offset {event.offset}) {why}")  # fmt: skip
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
            # The earliest fence: a stalled member is fenced at the stall, and again when it
            # learns on waking that the group took its partitions (a later ``lost`` fence).
            fence = min(
                (f for f in fences if f.covers(event.pid, event.partition)
                 and start.t < f.t < event.t),
                key=lambda f: f.t,
                default=None,
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
