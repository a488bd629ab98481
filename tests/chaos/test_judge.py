"""The chaos judge itself, on made-up timelines (no server): a duplicate is excused only by a
fault that explains it, so a judge that excuses too much would hide keyshared's bugs."""

from __future__ import annotations

from typing import cast

import pytest

from tests.chaos.accounting import Call, account_duplicates
from tests.chaos.fences import Fence, Handover, unexpected_expiries
from tests.chaos.harness import _gap
from tests.chaos.observers import GroupStates
from tests.chaos.plan import FAULT_GAP_S, ChaosPlan, Fault, fault_schedule
from tests.chaos.result import ChaosResult
from tests.chaos.test_chaos import long_plan
from tests.kafka.support.journal import Event, RecordId

S = 1_000_000_000  # one second in ns
KEY = b"k"


def states(*stretches: tuple[float, float, bool]) -> GroupStates:
    """Group-state samples every 100 ms over the given (from s, to s, stable) stretches."""
    probe = GroupStates.__new__(GroupStates)  # no subprocess: the samples are given
    probe.samples = [
        (int(t * S / 10), stable)
        for lo, hi, stable in stretches
        for t in range(int(lo * 10), int(hi * 10))
    ]
    return probe


def judge(
    first: Call,
    redo: Call,
    group: GroupStates,
    faults: list[Fault],
    plan: ChaosPlan | None = None,
) -> ChaosResult:
    plan = plan or ChaosPlan("partition", commit_interval=0.2)
    result = ChaosResult(plan, faults, t0=0)
    result.duplicates = [first.rid]
    result.group_states = group
    account_duplicates([first, redo], result, [], plan)
    return result


def test_longest_stable_stretch() -> None:
    group = states((0, 5, True), (5, 8, False), (8, 9, True))
    assert group.longest_stable(0, 9 * S) == pytest.approx(4.9, abs=0.11)
    assert group.longest_stable(5 * S, 9 * S) == pytest.approx(1.0, abs=0.11)
    assert group.longest_stable(5 * S, 8 * S) == 0


def test_a_record_finished_while_the_group_rebalanced_until_its_redo_is_excused() -> None:
    first = Call(1, (KEY, 1), start=int(5.1 * S), end=int(5.2 * S), kind="E")
    redo = Call(2, (KEY, 1), start=int(7.9 * S), end=8 * S, kind="E")
    result = judge(first, redo, states((0, 5, True), (5, 8, False), (8, 20, True)), [])
    assert result.rebalance_duplicates == 1
    assert not result.unexplained_duplicates


def test_a_record_redone_after_a_stable_commit_window_is_a_finding() -> None:
    """The group was stable for 4 s after the record finished: keyshared had every chance to
    commit it, so its redo is not the protocol's doing."""
    first = Call(1, (KEY, 1), start=int(1.0 * S), end=int(1.1 * S), kind="E")
    redo = Call(2, (KEY, 1), start=int(7.9 * S), end=8 * S, kind="E")
    result = judge(first, redo, states((0, 5, True), (5, 8, False), (8, 20, True)), [])
    assert result.rebalance_duplicates == 0
    assert len(result.unexplained_duplicates) == 1


def test_a_kill_excuses_only_the_records_above_what_its_victim_committed() -> None:
    kill = Fault("member_kill", 0.0, pid=1, t_fault=10 * S)
    kill.committed = {0: (100, frozenset({105}))}
    stable = states((0, 30, True))
    # finished long before the kill, but above the committed offset: uncommitted, counted
    early = Call(1, (KEY, 1), start=1 * S, end=int(1.1 * S), kind="E", partition=0, offset=101)
    redo = Call(2, (KEY, 1), start=12 * S, end=int(12.1 * S), kind="E", partition=0, offset=101)
    result = judge(early, redo, stable, [kill])
    assert kill.redone_uncommitted == 1 and result.late_commit_duplicates == 1
    assert len(result.unexplained_duplicates) == 1, "the group was stable: a commit was due"
    # within the commit window before the kill: in flight or at risk, excused
    kill.redone_uncommitted = 0
    late = Call(
        1, (KEY, 2), start=int(9.5 * S), end=int(9.6 * S), kind="E", partition=0, offset=102
    )
    again = Call(2, (KEY, 2), start=12 * S, end=int(12.1 * S), kind="E", partition=0, offset=102)
    result = judge(late, again, stable, [kill])
    assert kill.redone_uncommitted == 1 and not result.unexplained_duplicates


def test_a_long_call_that_finished_just_before_its_member_was_killed_is_at_risk() -> None:
    """Seen in an exclusive topology run: five records started well before the commit window
    and finished 10 ms before their member's SIGKILL; nothing could have committed them, yet
    the judge, which only looked at when a call started, called their redo unexplained."""
    kill = Fault("member_kill", 0.0, pid=1, t_fault=10 * S)  # exclusive: no commit snapshot
    stable = states((0, 30, True))
    first = Call(1, (KEY, 1), start=5 * S, end=int(9.99 * S), kind="E", partition=0, offset=7)
    redo = Call(2, (KEY, 1), start=12 * S, end=int(12.1 * S), kind="E", partition=0, offset=7)
    result = judge(first, redo, stable, [kill])
    assert kill.at_risk == 1 and not result.unexplained_duplicates
    # finished well before the window: a commit was due, its redo is a finding
    kill = Fault("member_kill", 0.0, pid=1, t_fault=10 * S)
    early = Call(1, (KEY, 2), start=1 * S, end=2 * S, kind="E", partition=0, offset=8)
    again = Call(2, (KEY, 2), start=12 * S, end=int(12.1 * S), kind="E", partition=0, offset=8)
    result = judge(early, again, stable, [kill])
    assert kill.at_risk == 0 and len(result.unexplained_duplicates) == 1


def _handed_over(*handovers: Handover) -> ChaosResult:
    """Finding 11 (partition leases): the record finished at 5.2 s while the group rebalanced
    (5 s to 10 s); the slow key's redo came only at 14 s, after 4 s of stable group."""
    first = Call(
        1, (KEY, 1), start=int(5.1 * S), end=int(5.2 * S), kind="E", partition=0, offset=50
    )
    redo = Call(2, (KEY, 1), start=14 * S, end=int(14.1 * S), kind="E", partition=0, offset=50)
    plan = ChaosPlan("partition_leases", commit_interval=0.2)
    result = ChaosResult(plan, [], t0=0, handovers=list(handovers))
    result.duplicates = [first.rid]
    result.group_states = states((0, 5, True), (5, 10, False), (10, 20, True))
    account_duplicates([first, redo], result, [], plan)
    return result


def test_a_lease_taken_below_the_record_during_the_rebalance_excuses_a_late_redo() -> None:
    result = _handed_over(Handover(pid=2, t=8 * S, partition=0, offset=40))
    assert result.rebalance_duplicates == 1 and not result.unexplained_duplicates
    assert result.handover_bounded == 1
    result = _handed_over(Handover(pid=2, t=8 * S, partition=0, offset=None))
    assert result.rebalance_duplicates == 1 and not result.unexplained_duplicates


@pytest.mark.parametrize(
    "handover",
    [
        Handover(pid=2, t=8 * S, partition=0, offset=51),  # resumed above it: it was committed
        Handover(pid=2, t=8 * S, partition=1, offset=40),  # another partition
        Handover(pid=1, t=8 * S, partition=0, offset=40),  # its own process took it again
        Handover(pid=2, t=5 * S, partition=0, offset=40),  # before the record finished
        Handover(pid=2, t=int(12.5 * S), partition=0, offset=40),  # after a stable window
    ],
)
def test_a_hand_over_that_does_not_decide_the_redo_excuses_nothing(handover: Handover) -> None:
    result = _handed_over(handover)
    assert result.rebalance_duplicates == 0 and len(result.unexplained_duplicates) == 1


def test_starts_of_a_stalled_member_before_it_noticed_the_expiry_are_taken_out() -> None:
    from tests.chaos.analysis import _drop_zombie_starts
    from tests.kafka.support.journal import Event

    stall = Fault("member_stall", 0.0, pid=7, t_fault=1 * S, t_recovered=5 * S, expired=True)
    stall.t_noticed = 6 * S
    frozen = [Event("S", KEY, 1, 7, 0, 10, int(0.5 * S), 1), Event("E", KEY, 1, 7, 0, 10, 5 * S, 1)]
    zombie = [Event("S", KEY, 2, 7, 0, 11, int(5.5 * S), 1), Event("E", KEY, 2, 7, 0, 11, 7 * S, 1)]
    later = [Event("S", KEY, 3, 7, 0, 12, 8 * S, 1), Event("E", KEY, 3, 7, 0, 12, 9 * S, 1)]
    kept, found, decided = _drop_zombie_starts([*frozen, *zombie, *later], [stall])
    assert kept == [*frozen, *later]
    assert len(found) == 1 and "seq 2" in found[0] and decided == []


def test_a_start_journaled_before_the_harness_stamped_the_sigcont_is_a_zombie_start() -> None:
    """Finding 18: the harness stamps the SIGCONT after sending it; on a loaded machine the
    member ran first and journaled a start 20 ms before that stamp. Nothing can start while
    the process is stopped, so the start came after the SIGCONT all the same."""
    from tests.chaos.analysis import _drop_zombie_starts

    stall = Fault("member_stall", 0.0, pid=7, t_fault=1 * S, t_recovered=5 * S, expired=True)
    stall.t_noticed = 6 * S
    early = [Event("S", KEY, 2, 7, 0, 11, int(4.98 * S), 1), Event("E", KEY, 2, 7, 0, 11, 7 * S, 1)]
    kept, found, decided = _drop_zombie_starts(early, [stall])
    assert kept == [] and len(found) == 1 and decided == []


def test_a_threads_first_start_after_the_stop_was_decided_before_it() -> None:
    """Finding 18: a worker that passed the last liveness check just before the SIGSTOP calls
    the handler on waking (the documented exception). It journals that start as its thread's
    first line after the stop; a later start of that thread, or one after another line of it
    (the end of a call frozen mid-way), was decided after the resume and fails the run."""
    from tests.chaos.analysis import _drop_zombie_starts

    stall = Fault("member_stall", 0.0, pid=7, t_fault=1 * S, t_recovered=5 * S, expired=True)
    stall.t_noticed = 6 * S

    def call(seq: int, start: float, end: float, thread: int) -> list[Event]:
        return [
            Event("S", KEY, seq, 7, 0, 10 + seq, int(start * S), 1, thread),
            Event("E", KEY, seq, 7, 0, 10 + seq, int(end * S), 1, thread),
        ]

    before = call(1, 0.2, 0.5, thread=101)  # its thread's line before the stop
    on_waking = call(2, 5.001, 5.2, thread=101)  # first line of thread 101 after the stop
    next_one = call(3, 5.3, 5.4, thread=101)  # decided after the resume
    frozen = [Event("S", KEY, 4, 7, 0, 14, int(0.9 * S), 1, 102),
              Event("E", KEY, 4, 7, 0, 14, int(5.01 * S), 1, 102)]  # fmt: skip
    after_frozen = call(5, 5.02, 5.1, thread=102)  # decided after the resume
    events = sorted([*before, *on_waking, *next_one, *frozen, *after_frozen], key=lambda e: e.t)
    kept, found, decided = _drop_zombie_starts(events, [stall])
    assert len(decided) == 1 and "seq 2" in decided[0]
    assert sorted(f.split(" seq ")[1].split()[0] for f in found) == ["3", "5"]
    assert kept == sorted([*before, *frozen], key=lambda e: e.t)


def _killed_mid_rebalance(
    committed: dict[int, tuple[int, frozenset[int]]], group: GroupStates
) -> tuple[ChaosResult, Fault]:
    """The run of issue 14's partition mode: the victim finished offset 101 at 6.1 s while its
    group rebalanced (5 s to 20 s), was killed at 10 s, and the new owner, stable from 20 s,
    came to offset 101 only at 24 s (a slow key: its earlier records first)."""
    kill = Fault("member_kill", 0.0, pid=1, t_fault=10 * S)
    kill.committed = committed
    first = Call(1, (KEY, 1), start=6 * S, end=int(6.1 * S), kind="E", partition=0, offset=101)
    redo = Call(2, (KEY, 1), start=24 * S, end=int(24.2 * S), kind="E", partition=0, offset=101)
    return judge(first, redo, group, [kill]), kill


REBALANCE_UNTIL_20S = ((0, 5, True), (5, 20, False), (20, 30, True))


def test_a_member_killed_before_the_rebalance_ended_excuses_its_uncommitted_records() -> None:
    """Its commits could not go through from the record's finish to its death; the stable
    stretch before the late redo came after the kill and could not help it."""
    result, kill = _killed_mid_rebalance({0: (100, frozenset())}, states(*REBALANCE_UNTIL_20S))
    assert kill.redone_uncommitted == 1
    assert result.killed_in_rebalance_duplicates == 1
    assert result.rebalance_duplicates == 0
    assert not result.unexplained_duplicates
    assert "before the group's rebalance ended" in result.report()


def test_a_member_stalled_past_its_session_before_the_rebalance_ended_is_judged_as_killed() -> None:
    """CI, 2026-11-29 (partition leases): a replacement's join put the group in a rebalance
    that lasted until the killed member's Kafka session ran out; the stalled member finished
    records in it, none of its commits went through, and it was frozen (then fenced) before
    the group was stable. The stable stretch before the redo came while it was frozen."""
    stall = Fault("member_stall", 0.0, pid=1, t_fault=10 * S, t_recovered=19 * S, expired=True)
    stall.committed = {0: (100, frozenset())}
    first = Call(1, (KEY, 1), start=6 * S, end=int(6.1 * S), kind="E", partition=0, offset=101)
    redo = Call(2, (KEY, 1), start=24 * S, end=int(24.2 * S), kind="E", partition=0, offset=101)
    result = judge(first, redo, states(*REBALANCE_UNTIL_20S), [stall])
    assert result.killed_in_rebalance_duplicates == 1
    assert not result.unexplained_duplicates
    committed = Fault("member_stall", 0.0, pid=1, t_fault=10 * S, t_recovered=19 * S, expired=True)
    committed.committed = {0: (100, frozenset({101}))}  # committed before the stall: a finding
    result = judge(first, redo, states(*REBALANCE_UNTIL_20S), [committed])
    assert len(result.unexplained_duplicates) == 1


def test_a_record_the_killed_member_had_committed_is_still_a_finding() -> None:
    """Committed (as a finished offset above the cursor) before the kill, yet redone: the new
    owner did not honour the commit, whatever the group's state."""
    committed = {0: (100, frozenset({101}))}
    result, kill = _killed_mid_rebalance(committed, states(*REBALANCE_UNTIL_20S))
    assert kill.redone_uncommitted == 0
    assert result.killed_in_rebalance_duplicates == 0
    assert len(result.unexplained_duplicates) == 1


def test_a_stable_commit_window_before_the_kill_is_a_finding() -> None:
    """Stable from 6.5 s to 9.5 s: the victim had a commit window before it died."""
    group = states(
        (0, 5, True), (5, 6.5, False), (6.5, 9.5, True), (9.5, 20, False), (20, 30, True)
    )
    result, _ = _killed_mid_rebalance({0: (100, frozenset())}, group)
    assert result.killed_in_rebalance_duplicates == 0
    assert len(result.unexplained_duplicates) == 1


def test_a_call_journaled_as_its_member_was_being_killed_does_not_stay_open() -> None:
    """The harness takes the kill time, then sends SIGKILL: a start journaled in between is
    later than the kill. It must not count as open for ever (a short exclusive run reported
    "two active members at once" 8 s after the previous active member's kill)."""
    from tests.coordinator.test_exclusive_mode import overlaps

    old, new = 100, 200
    events = [
        Event("S", b"a", 1, old, 0, 0, 1_000, 1),
        Event("S", b"b", 1, old, 0, 1, 2_050, 1),  # journaled 50 ns after the kill time
        Event("S", b"c", 1, new, 0, 2, 9_000, 1),
    ]
    assert overlaps(events, {old: 2_000}) == []
    assert overlaps(events, {}) != []  # without the kill, the old member's calls stay open


def test_a_call_frozen_in_a_stall_ends_at_the_stall_not_at_a_later_fence() -> None:
    """A CI run (partition leases): the stalled member's call of seq 2 was ended at its later
    ``lost`` fence (it learned on waking that the group took its partition), listed first,
    instead of at the stall, so the new owner's seq 2 during the stall looked like an overlap."""
    from tests.chaos.analysis import _end_fenced_calls
    from tests.chaos.fences import Fence

    stall = Fence(7, 2 * S, 11 * S, None, "stall")
    lost = Fence(7, 11 * S, 11 * S, frozenset({0}), "lost")
    frozen = [Event("S", KEY, 2, 7, 0, 10, 1 * S, 1), Event("E", KEY, 2, 7, 0, 10, 12 * S, 1)]
    events, zombies = _end_fenced_calls(frozen, [lost, stall])
    assert [(e.kind, e.t) for e in events] == [("S", 1 * S), ("K", 2 * S)]
    assert zombies == {"stall": 1}


def test_convergence_does_not_count_the_stretch_the_schedule_held_the_producer() -> None:
    """Finding 19: in an exclusive topology run the keys a ZooKeeper leader's crash touched
    converged "after 84 s", but for 70 of them the producer was held back by the schedule
    (waiting out a rolling restart): no key can finish a record that was not produced."""
    from tests.chaos.accounting import measure_convergence

    fault = Fault("zookeeper_leader_kill", 0.0, t_fault=1 * S, t_recovered=2 * S)
    result = ChaosResult(ChaosPlan("exclusive", fail_always_rate=0.0), [fault], t0=0)
    result.producer_pauses = [(3 * S, 73 * S)]
    before = Call(1, (KEY, 1), start=int(0.8 * S), end=int(0.9 * S), kind="E")
    after = Call(1, (KEY, 2), start=int(79.9 * S), end=80 * S, kind="E")
    measure_convergence([before, after], result)
    assert fault.converged_s == pytest.approx(9.0)


class _Logs:
    """Members' logs only (``log(name)``), as the fence readers use them."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.names_by_pid = {7: "M1"}

    def log(self, name: str) -> str:
        return self.text


_TWO_EXPIRIES = (
    "2026-11-26 00:40:35,840 INFO coordinator.session: ZooKeeper session suspended\n"
    "2026-11-26 00:40:35,866 ERROR keyshared.modes.session_gate: ZooKeeper session expired: x\n"
    "2026-11-26 00:41:44,978 INFO coordinator.session: ZooKeeper session suspended\n"
    "2026-11-26 00:41:50,484 ERROR keyshared.modes.session_gate: ZooKeeper session expired: x\n"
)


def test_a_stall_is_noticed_at_its_own_expiry_not_at_a_later_one() -> None:
    """Finding 20: a stalled member whose session expired again a minute later (an ensemble
    starved under load) had its stall "noticed" at the later expiry, so every call it started
    in between counted as a zombie start and was taken out of the timeline: 123 records looked
    lost and 106 overtaken. The stall's expiry is the first one after the stall."""
    from datetime import datetime

    from tests.chaos.fences import log_time, session_expiries
    from tests.chaos.plan import EXPIRED_LOG

    offset = int(datetime(2026, 11, 26, 0, 0, 0).timestamp() * 1e9)
    stalled = int((40 * 60 + 30) * S)
    logs = _Logs(_TWO_EXPIRIES)
    noticed = log_time(logs, "M1", EXPIRED_LOG, offset, after=stalled)  # type: ignore[arg-type]
    assert noticed == pytest.approx((40 * 60 + 35.866) * S, abs=1e6)
    stall = Fault("member_stall", 0.0, target="M1", pid=7, t_fault=stalled)
    [(name, fence)] = session_expiries(logs, [stall], offset)  # type: ignore[arg-type]
    assert name == "M1" and fence.cause == "expired"
    assert fence.t == pytest.approx((41 * 60 + 44.978) * S, abs=1e6)
    assert fence.t_resume == pytest.approx((41 * 60 + 50.484) * S, abs=1e6)


def _at(stamp: str) -> int:
    """A log line's time (local, as the members log it) on a journal clock equal to it."""
    from datetime import datetime

    return int(datetime.fromisoformat(f"2026-11-26 {stamp}").timestamp() * S)


_LOGS = """\
2026-11-26 12:43:12,118 WARNING keyshared.kafka.poll_loop: lost t[4], t[3]: in-flight results will be discarded, nothing committed
2026-11-26 12:43:14,229 INFO keyshared.kafka.poll_loop: assigned t[4]@41622
"""  # noqa: E501


def test_a_lost_partition_is_a_new_member_only_from_its_next_assignment() -> None:
    """The 30-minute partition-lease run with KIP-848 (2026-11-26 13:06) reported 4 overtakes
    that never happened: a member started its last records of partition 4 within a millisecond
    of its ``lost`` line, so the judge counted them to the member it became after the loss, and
    then its re-read from the committed offset, 2.1 s later, looked like going back."""
    from tests.chaos.analysis import _drop_starts_after_a_loss, _incarnations
    from tests.chaos.fences import LOG_SLACK_NS, NEVER, fences_from_logs
    from tests.kafka.support.journal import check

    fences = fences_from_logs(_Logs(_LOGS), clock_offset_ns=0)  # type: ignore[arg-type]
    by_partition = {next(iter(f.partitions or ())): f for f in fences}
    lost = _at("12:43:12.118")
    assert by_partition[4].t == lost and by_partition[3].t == lost
    assert by_partition[4].t_resume == _at("12:43:14.229") - LOG_SLACK_NS
    assert by_partition[3].t_resume == NEVER  # never assigned again here

    ms = S // 1000
    events = [
        Event("S", KEY, 1, 7, 4, 10, lost - 5 * ms, 1),
        Event("E", KEY, 1, 7, 4, 10, lost - 4 * ms, 1),
        Event("S", KEY, 2, 7, 4, 11, lost + ms // 2, 1),  # within the log line's millisecond
        Event("E", KEY, 2, 7, 4, 11, lost + ms, 1),
        Event("S", KEY, 2, 8, 4, 11, lost + 300 * ms, 1),  # the next owner, from the commit
        Event("E", KEY, 2, 8, 4, 11, lost + 301 * ms, 1),
        Event("S", KEY, 2, 7, 4, 11, _at("12:43:14.300"), 1),  # 7 again, from 8's commit
        Event("E", KEY, 2, 7, 4, 11, _at("12:43:14.301"), 1),
    ]
    kept, found = _drop_starts_after_a_loss(events, fences)
    assert found == []
    incarnations, _ = _incarnations(kept, fences, {})
    assert check(incarnations, {KEY: 2}, killed={}).violations == []

    late = [Event("S", KEY, 3, 7, 4, 12, lost + 50 * ms, 1)]  # the loss had taken effect
    _, found = _drop_starts_after_a_loss(late, fences)
    assert len(found) == 1 and "after it logged the partition lost" in found[0]


def test_a_cut_off_members_start_within_its_lost_lines_millisecond_is_not_an_overtake() -> None:
    """A CI run (plain partition mode, KIP-848, broker restart): the member cut off from the
    broker ran a key's seq 15-26 and started seq 27 10 us after the millisecond of its ``lost``
    line. The cut-off window ended at the line, the after-loss window begins 3 ms later: seq 27
    fell between them, was judged alone with 15-26 taken out, and read as 'seq 27 started
    before seq 26 ever finished'. Both windows now meet at the line's precision."""
    from tests.chaos.analysis import _drop_cut_off_starts, _drop_starts_after_a_loss
    from tests.chaos.fences import LOG_SLACK_NS, Fence

    ms = S // 1000
    outage = Fault("broker_restart", 0.0, t_fault=1 * S, t_recovered=16 * S)
    lost = 15 * S
    fence = Fence(7, lost, lost + 1_300 * ms, frozenset({4}), "lost")
    cut_off = [  # seq 26, then 27 within the line's millisecond
        Event("S", KEY, 26, 7, 4, 3333, lost - 24 * ms, 1),
        Event("E", KEY, 26, 7, 4, 3333, lost - 22 * ms, 1),
        Event("S", KEY, 27, 7, 4, 3369, lost + S // 100_000, 1),
        Event("E", KEY, 27, 7, 4, 3369, lost + 2 * ms, 1),
    ]
    kept, found = _drop_starts_after_a_loss(cut_off, [fence])
    kept, cut = _drop_cut_off_starts(kept, [fence], [outage])
    assert found == [] and kept == [] and len(cut) == 2

    late = [Event("S", KEY, 28, 7, 4, 3400, lost + LOG_SLACK_NS + ms, 1)]  # past the precision
    kept, found = _drop_starts_after_a_loss(late, [fence])
    _, cut = _drop_cut_off_starts(kept, [fence], [outage])
    assert len(found) == 1 and cut == []


@pytest.mark.parametrize("kind", ["zookeeper_latency", "zookeeper_lost_reply"])
def test_a_link_fault_excuses_no_redo_and_no_expiry(kind: str) -> None:
    """The session survives a link fault: a record redone around one is a finding (unlike
    around a server restart), and so is a session lost from its start to 1.5 s after it."""
    fault = Fault(kind, 5.0, t_fault=5 * S, t_recovered=9 * S)
    first = Call(1, (KEY, 1), start=int(5.1 * S), end=int(5.2 * S), kind="E")
    redo = Call(2, (KEY, 1), start=int(7.9 * S), end=8 * S, kind="E")
    result = judge(first, redo, states((0, 20, True)), [fault])
    assert len(result.unexplained_duplicates) == 1
    during = Fence(1, int(10.4 * S), 14 * S, None, "expired")
    after = Fence(2, int(10.6 * S), 14 * S, None, "expired")
    found = unexpected_expiries([("M1", during), ("M2", after)], [fault], 4.0)
    assert [line.split(":")[0] for line in found] == ["M1"]


def test_a_long_run_never_injects_faults_faster_than_planned() -> None:
    """After a fault that took longer than planned, a short run catches its schedule up with
    faults FAULT_GAP_S apart (saturated on purpose); a long run keeps each planned gap, so no
    burst of kills outpaces the plan's rate."""
    short = ChaosPlan("exclusive", fail_always_rate=0.0)
    faults = fault_schedule(short)
    assert {_gap(short, faults, k) for k in range(len(faults))} == {FAULT_GAP_S}
    long = long_plan(short, 10)
    faults = fault_schedule(long)
    gaps = [_gap(long, faults, k) for k in range(1, len(faults))]
    planned = [faults[k].at - faults[k - 1].at for k in range(1, len(faults))]
    assert gaps == [max(FAULT_GAP_S, p) for p in planned]
    assert max(gaps) > FAULT_GAP_S  # member kills 4-7 s apart


_REDO_LOGS = """\
2026-11-26 12:40:00,000 INFO keyshared.kafka.poll_loop: assigned t[4]@100
2026-11-26 12:41:00,000 WARNING keyshared.kafka.transactions: transaction failed (KafkaError{code=ILLEGAL_GENERATION}): aborting it and redoing the records since the last commit
2026-11-26 12:41:00,500 WARNING keyshared.kafka.poll_loop: lost t[4]: in-flight results will be discarded, nothing committed
2026-11-26 12:41:00,600 INFO keyshared.kafka.poll_loop: assigned t[4]@150
2026-11-26 12:42:00,000 WARNING keyshared.kafka.poll_loop: lost t[4]: in-flight results will be discarded, nothing committed
"""  # noqa: E501


def test_a_redo_after_a_failed_transaction_is_no_loss_to_the_group() -> None:
    """The 30-minute exactly-once plain-partition runs reported 273,926 records "lost" and
    11,070 overtakes while every output was read exactly once: the committer's redo of a failed
    transaction logs the poll loop's ``lost`` line, which the judge took for the group taking
    the partition, and plain partition mode's cut-off rule then dropped every call the member
    started since the last broker fault, end lines included. A ``lost`` line that follows a
    failed transaction is a redo: no cut-off window opens at it, and a record whose end the
    rules take out of the order check still counts as processed."""
    from tests.chaos.analysis import _drop_cut_off_starts
    from tests.chaos.fences import fences_from_logs

    redo, lost = sorted(fences_from_logs(_Logs(_REDO_LOGS), 0), key=lambda f: f.t)  # type: ignore[arg-type]
    assert (redo.cause, lost.cause) == ("redo", "lost")
    outage = Fault("leader_kill", 0.0, t_fault=_at("12:39:00"), t_recovered=_at("12:39:30"))
    ran = [
        Event("S", KEY, 1, 7, 4, 120, _at("12:40:30"), 1),
        Event("E", KEY, 1, 7, 4, 120, _at("12:40:31"), 1),
    ]
    kept, dropped = _drop_cut_off_starts(ran, [redo], [outage])
    assert kept == ran and dropped == []
    near = Fault("leader_kill", 0.0, t_fault=_at("12:39:00"), t_recovered=_at("12:41:50"))
    _, dropped = _drop_cut_off_starts(ran, [lost], [near])  # a real loss still opens one
    assert dropped


def test_a_cut_off_window_opens_only_for_an_outage_the_loss_can_follow() -> None:
    """A member learns of its eviction within a session timeout (plus a rebalance) of reaching
    the broker again, and it was connected when the group last assigned it the partition: calls
    outside those bounds are judged, not excused. Unbounded, one ``lost`` line 85 s after the
    last leader kill excused every call of the partition since."""
    from tests.chaos.analysis import CUT_OFF_NOTICE_NS, _drop_cut_off_starts
    from tests.chaos.fences import Fence

    lost = 200 * S
    fence = Fence(7, lost, lost + 2 * S, frozenset({4}), "lost")
    calls = [Event("S", KEY, n, 7, 4, 100 + n, (100 + 20 * n) * S, 1) for n in range(5)]
    # (starts at 100, 120, 140, 160 and 180 s)

    long_ago = Fault("leader_kill", 0.0, t_fault=90 * S, t_recovered=lost - CUT_OFF_NOTICE_NS - S)
    kept, dropped = _drop_cut_off_starts(calls, [fence], [long_ago])
    assert kept == calls and dropped == []

    recent = Fault("leader_kill", 0.0, t_fault=90 * S, t_recovered=lost - 10 * S)
    _, dropped = _drop_cut_off_starts(calls, [fence], [recent])
    assert len(dropped) == 5  # every start since the outage began

    earlier = Fence(7, 130 * S, 150 * S, frozenset({4}), "lost")  # assigned again at 150 s
    kept, dropped = _drop_cut_off_starts(calls, [earlier, fence], [recent])
    assert len(dropped) == 2 + 2  # 160 and 180 s for the later loss; 100 and 120 s for the earlier
    assert [e.seq for e in kept] == [2]  # 140 s: between the loss and the assignment after it


@pytest.mark.parametrize("kept", [10_080.0, None])
def test_an_offset_expiry_spell_on_a_cluster_that_keeps_offsets_longer_checks_nothing(
    monkeypatch: pytest.MonkeyPatch, kept: float | None
) -> None:
    """An external topology keeps its own retention (a week by default): a spell there could
    see no offset expire, and its note said "offsets that expired: none" as if it had looked.
    It is skipped instead, and says why, without holding the input back or killing anyone."""
    from tests.chaos import retention_fault

    monkeypatch.setattr(retention_fault, "_retention_minutes", lambda _bootstrap: kept)

    class _Untouchable:
        bootstrap = "127.0.0.1:9"

        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"the skipped spell used {name}")

    fault = Fault("offset_expiry", 10.0)
    nothing = _Untouchable()
    retention_fault.outlive_retention(
        fault,
        ChaosPlan(mode="partition"),
        nothing,
        nothing,
        nothing,
        nothing,
        1.0,  # type: ignore[arg-type]
    )
    assert fault.note.startswith("not checked: the cluster keeps offsets for")
    assert ("10080 min" if kept else "unknown") in fault.note
    assert not fault.expired and fault.t_fault > 0 and not fault.pid


def test_an_exactly_once_member_may_leave_a_transaction_s_worth_uncommitted_at_a_kill() -> None:
    """An exactly-once member commits through a transaction (outputs acknowledged by every
    in-sync replica, offsets added, markers written): on the loaded three-broker topology the
    oldest record still uncommitted at a kill was up to 5.6 s old, and 960 redos finished
    2.3-2.9 s before their kill read as unexplained under an at-least-once commit's 2 s. An
    at-least-once plan keeps the tighter window: a record 2.5 s old at a kill is a finding."""
    from dataclasses import replace

    from tests.chaos.accounting import commit_window_ns

    alo = ChaosPlan("partition", commit_interval=0.2)
    eos = replace(alo, exactly_once=True)
    assert commit_window_ns(eos) - commit_window_ns(alo) == 4 * S
    kill = Fault("member_kill", 0.0, pid=1, t_fault=10 * S)
    kill.committed = {0: (100, frozenset())}
    first = Call(
        1, (KEY, 1), start=int(7.4 * S), end=int(7.5 * S), kind="E", partition=0, offset=101
    )
    redo = Call(2, (KEY, 1), start=12 * S, end=int(12.1 * S), kind="E", partition=0, offset=101)
    stable = states((0, 30, True))
    assert len(judge(first, redo, stable, [kill]).unexplained_duplicates) == 1
    kill.redone_uncommitted = 0
    assert not judge(first, redo, stable, [kill], plan=eos).unexplained_duplicates


# -- the topic rewind (tests/chaos/rewind_fault.py) ---------------------------------------------


def _seq_1_and_2_finished() -> list[Event]:
    """The old log's first two records of ``KEY``, run and finished before the rewind."""
    return [
        Event("S", KEY, 1, 7, 0, 0, int(1.1 * S), 1),
        Event("E", KEY, 1, 7, 0, 0, int(1.2 * S), 1),
        Event("S", KEY, 2, 7, 0, 1, int(2.1 * S), 1),
        Event("E", KEY, 2, 7, 0, 1, int(2.2 * S), 1),
    ]


def _rewind_run(*extra: Event, new_log_finishes: bool = True) -> ChaosResult:
    """One key, six records. The old log has seq 1-4: 1 and 2 finish, 3 fails its first attempt
    just before the topic is deleted at 5 s (the fault's record, in its backoff), 4 never
    starts. The topic is back at 6 s; the new log has seq 5 and 6, which run at 8 and 9 s."""
    from tests.chaos.analysis import analyse
    from tests.chaos.plan import TOPIC_REWIND

    plan = ChaosPlan(
        "partition", keys=1, records=6, fail_always_rate=0.0, rewinds_at=(0.5,), retry_backoff=5.0
    )
    rewind = Fault(TOPIC_REWIND, 0.0, t_fault=5 * S, t_recovered=6 * S, record=(KEY, 3))
    result = ChaosResult(plan, [rewind], t0=0)
    sent_at: dict[RecordId, int] = {(KEY, seq): seq * S for seq in range(1, 5)}
    sent_at |= {(KEY, 5): 7 * S, (KEY, 6): 7 * S}
    old = [
        *_seq_1_and_2_finished(),
        Event("S", KEY, 3, 7, 0, 2, int(4.8 * S), 1),
        Event("F", KEY, 3, 7, 0, 2, int(4.9 * S), 1),
    ]
    new = [Event("S", KEY, 5, 7, 0, 0, 8 * S, 1), Event("E", KEY, 5, 7, 0, 0, int(8.1 * S), 1)]
    if new_log_finishes:
        new += [Event("S", KEY, 6, 7, 0, 1, 9 * S, 1), Event("E", KEY, 6, 7, 0, 1, 9 * S + 1, 1)]
    analyse([*old, *new, *extra], plan, {KEY: 6}, {}, [], result, sent_at=sent_at)
    return result


def test_old_log_records_that_never_finished_were_deleted_with_the_topic_not_lost() -> None:
    result = _rewind_run()
    assert result.lost == []
    assert result.deleted_with_topic == [(KEY, 3), (KEY, 4)]
    assert "never ran again" in result.faults[0].note


def test_a_keys_new_log_records_follow_its_finished_old_log_prefix_without_an_overtake() -> None:
    """Seq 5 starts while seq 3 and 4 never finished: they went with the old log, and seq 2,
    the last one that was to finish, had."""
    assert _rewind_run().violations == []


def test_deleted_records_excuse_no_start_before_the_prefix_finished() -> None:
    """The gap is skipped, nothing more: seq 5 still needs seq 2 finished first."""
    from tests.kafka.support.journal import check

    events = [
        Event("S", KEY, 1, 7, 0, 0, 1, 1),
        Event("E", KEY, 1, 7, 0, 0, 2, 1),
        Event("S", KEY, 2, 7, 0, 1, 3, 1),
        Event("S", KEY, 5, 8, 0, 0, 4, 1),  # seq 2 still running
        Event("E", KEY, 2, 7, 0, 1, 5, 1),
        Event("E", KEY, 5, 8, 0, 0, 6, 1),
    ]
    report = check(events, {KEY: 5}, skipped={KEY: {3, 4}})
    assert report.missing == []
    assert any("seq 5" in v and "seq 2" in v for v in report.violations), report.violations


def test_a_record_produced_after_the_recreation_must_finish() -> None:
    result = _rewind_run(new_log_finishes=False)
    assert result.lost == [(KEY, 6)]
    assert (KEY, 6) not in result.deleted_with_topic


def test_the_record_in_its_backoff_at_the_deletion_running_again_is_a_finding() -> None:
    retry = [Event("S", KEY, 3, 7, 0, 2, 10 * S, 2), Event("E", KEY, 3, 7, 0, 2, 10 * S + 1, 2)]
    result = _rewind_run(*retry)
    assert len(result.rewind_reruns) == 1 and "(b'k', 3)" in result.rewind_reruns[0]
    assert "STARTED AGAIN" in result.faults[0].note
    assert (KEY, 3) not in result.deleted_with_topic  # it finished: processed, not deleted


def test_an_old_log_call_running_at_the_deletion_may_finish_after_it() -> None:
    """A straggler: seq 4 started before the deletion and ends after it; it is processed, and
    only seq 3 (in its backoff) was deleted."""
    from tests.chaos.analysis import analyse
    from tests.chaos.plan import TOPIC_REWIND

    plan = ChaosPlan(
        "partition", keys=1, records=5, fail_always_rate=0.0, rewinds_at=(0.5,), retry_backoff=5.0
    )
    rewind = Fault(TOPIC_REWIND, 0.0, t_fault=5 * S, t_recovered=6 * S, record=(b"j", 1))
    result = ChaosResult(plan, [rewind], t0=0)
    sent_at: dict[RecordId, int] = {(KEY, seq): seq * S for seq in range(1, 5)}
    sent_at[(KEY, 5)] = 7 * S
    events = [
        *_seq_1_and_2_finished(),
        Event("S", KEY, 3, 7, 0, 2, int(4.8 * S), 1),
        Event("E", KEY, 3, 7, 0, 2, int(5.5 * S), 1),  # the straggler
        Event("S", KEY, 5, 7, 0, 0, 8 * S, 1),
        Event("E", KEY, 5, 7, 0, 0, int(8.1 * S), 1),
    ]
    analyse(events, plan, {KEY: 5}, {}, [], result, sent_at=sent_at)
    assert result.deleted_with_topic == [(KEY, 4)]
    assert result.lost == [] and result.violations == [] and result.rewind_reruns == []


@pytest.mark.parametrize(
    ("settings", "problem"),
    [({"retry_backoff": None}, "retry_backoff"), ({"retry_backoff": 0.2}, "retry_backoff"),
     ({"retry_backoff": 5.0, "exactly_once": True}, "exactly_once")],
)  # fmt: skip
def test_a_rewind_plan_needs_a_long_backoff_and_no_outputs(
    settings: dict[str, object], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        ChaosPlan("partition", rewinds_at=(0.5,), **settings)  # type: ignore[arg-type]


def test_the_journal_tail_sees_failed_first_attempts_only(tmp_path: object) -> None:
    """The rewind fault waits on these: a retry's failure is no record entering its backoff
    for the first time, and a torn last line is read once it is whole."""
    from pathlib import Path

    from tests.chaos.observers import JournalTail

    journal = Path(str(tmp_path)) / "journal"
    journal.write_bytes(
        b"S 6b 3 7 0 2 100 1 9\nF 6b 3 7 0 2 200 1 9\nF 6b 4 7 0 3 300 2 9\nF 6b 5 7 0 4 4"
    )
    tail = JournalTail(journal)
    tail.poll()
    assert [(e.key, e.seq, e.t) for e in tail.first_failures] == [(KEY, 3, 200)]
    with open(journal, "ab") as f:
        f.write(b"00 1 9\n")
    tail.poll()
    assert [(e.seq, e.t) for e in tail.first_failures] == [(3, 200), (5, 400)]


def test_a_rewind_recreates_the_topic_while_the_failed_record_waits(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fault's steps in order, on stand-ins for the producer, the members and the admin
    client: it picks a live member's non-poison first failure (not a dead member's), stops the
    producer with everything acknowledged, deletes, waits until the topic is gone, creates it
    again with the plan's partitions, renews the producer and lets it go on."""
    import threading
    from pathlib import Path
    from types import SimpleNamespace

    import tests.chaos.rewind_fault as rewind_fault
    from tests.chaos.members import Members, PacedProducer
    from tests.chaos.observers import JournalTail
    from tests.chaos.plan import TOPIC_REWIND

    steps: list[str] = []
    topics: dict[str, object] = {"in": SimpleNamespace(error=None)}

    class Admin:
        def __init__(self, config: object) -> None:
            pass

        def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
            return SimpleNamespace(topics=dict(topics))

    def delete(admin: object, names: list[str], timeout: float) -> None:
        steps.append(f"delete {names}")
        topics.clear()

    def create(admin: object, name: str, partitions: int, **kwargs: object) -> None:
        steps.append(f"create {name} {partitions} {kwargs}")
        topics[name] = SimpleNamespace(error=None)

    monkeypatch.setattr(rewind_fault, "AdminClient", Admin)
    monkeypatch.setattr(rewind_fault, "delete_topics", delete)
    monkeypatch.setattr(rewind_fault, "create_topic", create)

    class Producer:
        records = [(KEY, seq) for seq in range(1, 101)]
        sent_at = {(KEY, seq): seq for seq in range(1, 51)}
        delivered, holding = 50, threading.Event()
        errors: list[str] = []

        def allow_until(self, share: float) -> None:
            steps.append(f"allow {share}")
            self.holding.set()

        def renew(self) -> None:
            steps.append("renew")

    journal = Path(str(tmp_path)) / "journal"
    journal.write_bytes(b"F 6b 3 99 0 2 100 1 9\nF 6b 4 7 1 3 200 1 9\n")  # pid 99 is dead
    members = SimpleNamespace(
        bootstrap="b", names_by_pid={7: "M1", 99: "M0"}, procs={"M1": object()}
    )
    plan = ChaosPlan("partition", partitions=6, rewinds_at=(0.5,), retry_backoff=5.0)
    fault = Fault(TOPIC_REWIND, 0.0)
    producer, tail = cast(PacedProducer, Producer()), JournalTail(journal)
    rewind_fault.recreate_under_backoff(
        fault, plan, producer, cast(Members, members), tail, "in", 0.75
    )
    assert steps == [
        "allow 0.5",
        "delete ['in']",
        "create in 6 {'replication_factor': -1}",
        "renew",
        "allow 0.75",
    ]
    assert fault.record == (KEY, 4) and fault.target == "M1" and fault.pid == 7
    assert 0 < fault.t_fault <= fault.t_recovered
    assert "seq 4 (partition 1 offset 3) in its backoff" in fault.note
