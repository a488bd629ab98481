"""A chaos run: ``keyshared run`` members consume while a fault schedule hits them, the broker
and ZooKeeper; the merged handler journals and the DLQ then judge the guarantees.

One run (:func:`run_chaos`) is bounded in time and stays on loopback:

1. a topic of ``partitions`` partitions (and its DLQ topic) is created; ``members``
   processes run ``tests.kafka.support.journal_handler:handle`` over it, journaling every
   handler start and end into one file with the machine-wide monotonic clock;
2. a producer writes ``records`` records over ``keys`` keys at an even pace for the whole
   fault phase, each record's value its per-key sequence number (1, 2, ...);
3. meanwhile the fault schedule (:func:`fault_schedule`) runs: SIGKILL a random member every
   few seconds and start a replacement at once, SIGKILL the broker once and start it again,
   and in coordinator modes stall a member (SIGSTOP) past its ZooKeeper session timeout, then
   SIGCONT it, and restart ZooKeeper once; and, through a proxy in front of each ZooKeeper
   server, slow every member's ZooKeeper traffic for a while and lose one reply to a write
   ZooKeeper applied (in the background: the schedule goes on meanwhile); and (by hand, on
   the topology) let the input expire its offsets, and delete and create the input topic
   again while a record waits out its retry backoff (``rewind_fault.py``). The handlers
   themselves fail on purpose (some records once, then a retry succeeds; some on every
   attempt: the DLQ) and some keys are slow;
4. after the fault phase the run waits (bounded) for the group's committed offsets to reach
   the end of every partition, stops the members with SIGTERM, reads the DLQ back and runs
   ``keyshared verify``;
5. :func:`analyse` judges the journals (with ``tests.kafka.support.journal.check``, the order
   checker of the other guarantee tests) and :meth:`ChaosResult.report` prints the figures.

Two accounting rules are part of the judgement and are stated here once:

- **A dead-lettered record is finished when its last attempt fails** (its ``F`` line with
  ``attempt == max_attempts``): the next record of the key may start only after that (in fact
  only after the DLQ write is acknowledged, later still), so the order check treats that line
  as the record's end. Such a record counts as processed only if it is read back from the DLQ.
- **A member stalled past its session** (SIGSTOP longer than ``--session-timeout``): its
  leases are gone and the next owner starts while the stalled handlers are frozen mid-call.
  That is the one documented overlap (``docs/guarantees.md``, "What is not guaranteed"): the
  stalled calls are taken to end at the SIGSTOP (their late ``E`` lines become ``K``: ended,
  not finished; the next owner must redo them), counted and reported as zombie calls. After
  the SIGCONT the process is a new member (it rejoins with a new session), so its later calls
  are checked as those of a new process. Only a stall whose expiry the member's log confirms is
  treated this way; any other overlap is a violation.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from keyshared.dev import LocalCluster
from keyshared.dev.topics import create_topic, delete_topics, unique_name
from keyshared.dev.topology import TopologyCluster
from tests.chaos.analysis import analyse
from tests.chaos.fences import (
    fences_from_logs,
    handovers_from_logs,
    log_time,
    session_expiries,
    unexpected_expiries,
)
from tests.chaos.members import Members, PacedProducer
from tests.chaos.observers import CommitWatch, GroupStates, JournalTail, read_dlq, run_verify
from tests.chaos.outputs import (
    FENCED_LOG,
    fence_producer,
    fenced_id,
    judge_outputs,
    read_outputs,
    role_fences,
)
from tests.chaos.plan import (
    EXPIRED_LOG,
    FAULT_GAP_S,
    KAFKA_SESSION_MS,
    LINK_FAULTS,
    OFFSET_EXPIRY,
    PRODUCER_FENCE,
    QUIET,
    TOPIC_REWIND,
    ChaosPlan,
    Fault,
    fault_fraction,
    fault_schedule,
)
from tests.chaos.result import ChaosResult
from tests.chaos.retention_fault import outlive_retention
from tests.chaos.rewind_fault import create_input_topic, recreate_under_backoff
from tests.chaos.topology_faults import TOPOLOGY_FAULTS, inject_topology_fault
from tests.coordinator.zk_proxy import ZooKeeperProxy
from tests.kafka.support.journal import (
    read_journal,
    sequenced,
)

__all__ = [
    "ChaosPlan",
    "ChaosResult",
    "Fault",
    "analyse",
    "fault_fraction",
    "fault_schedule",
    "run_chaos",
]

# -- the run -----------------------------------------------------------------------------------


def _set_group_session(admin: AdminClient, group: str) -> None:
    """KIP-848 groups take their session and heartbeat times from the broker (the group's own
    config overrides the broker's default), not from the consumers: give the group the same
    session as the classic runs' members ask for, so both protocols are judged alike."""
    entries = [
        ConfigEntry(name, str(ms), incremental_operation=AlterConfigOpType.SET)
        for name, ms in (
            ("consumer.session.timeout.ms", KAFKA_SESSION_MS),
            ("consumer.heartbeat.interval.ms", 1000),
        )
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def run_chaos(
    plan: ChaosPlan,
    cluster: LocalCluster | TopologyCluster,
    workdir: Path,
    *,
    progress: Callable[[str], None] = print,
) -> ChaosResult:
    """Run ``plan`` on ``cluster`` (restarted by the schedule) and judge it.

    Topics get the brokers' default replication factor: 1 on a ``LocalCluster``, 3 (with
    ``min.insync.replicas`` 2) on a three-broker ``TopologyCluster``.
    """
    if plan.topology != isinstance(cluster, TopologyCluster):
        raise ValueError(f"plan.topology={plan.topology} does not fit {cluster!r}")
    bootstrap, zookeeper = cluster.bootstrap_servers, cluster.zookeeper_hosts
    workdir.mkdir(parents=True, exist_ok=True)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": QUIET})
    topic = unique_name(f"chaos-{plan.mode}")
    group = unique_name(f"chaos-{plan.mode}")
    dlq = f"{topic}.dlq"
    create_input_topic(admin, topic, plan)  # as a rewind creates it again
    create_topic(admin, dlq, plan.partitions, replication_factor=-1)
    out = f"{topic}.out" if plan.exactly_once else None
    if out is not None:
        create_topic(admin, out, plan.partitions, replication_factor=-1)
    if plan.group_protocol == "consumer":
        _set_group_session(admin, group)
    keys: list[bytes | None] = [f"key-{i:05d}".encode() for i in range(plan.keys)]
    records = sequenced(keys, plan.per_key, seed=plan.seed)
    # One proxy in front of each ZooKeeper server: the members' only way to it, so that the
    # link faults reach every member whichever server it talks to.
    links = [ZooKeeperProxy(host) for host in zookeeper.split(",")] if plan.zookeeper_links else []
    if links:
        zookeeper = ",".join(link.hosts for link in links)
    members = Members(plan, bootstrap, zookeeper, group, topic, workdir, out_topic=out)
    faults = fault_schedule(plan)
    rng = random.Random(plan.seed + 1)
    tail = JournalTail(members.journal)
    t0 = time.monotonic_ns()
    clock_offset_ns = time.time_ns() - t0  # log times (wall clock) -> journal times
    result = ChaosResult(plan, faults, t0, logs=workdir)
    started = time.monotonic()
    snapshots: CommitWatch | None = None
    offsets: CommitWatch | None = None
    try:
        for i in range(plan.members):
            members.start(f"M{i}")
        producer = PacedProducer(bootstrap, topic, records, plan.fault_seconds)
        producer.start()
        # Offsets live in the Kafka group in the partition modes and in exclusive mode (whose
        # active member commits to the group id it does not join; key_shared keeps them in
        # ZooKeeper): there a kill's re-runs are judged against what the victim had committed.
        if plan.mode in ("partition", "partition_leases", "exclusive"):
            snapshots = CommitWatch(bootstrap, group, topic, plan.partitions)
        if plan.offset_expiries_at:  # the spell reads the offsets (in every mode)
            offsets = CommitWatch(bootstrap, group, topic, plan.partitions)
        if plan.mode in ("partition", "partition_leases"):  # a group that rebalances
            result.group_states = GroupStates(bootstrap, group, workdir / "group-states")
        not_before = started
        spells: list[threading.Thread] = []  # link faults under way
        for k, fault in enumerate(faults):
            if plan.topology:  # records up to the next fault's planned time, no further
                producer.allow_until(_allowed_until(faults, k, plan.fault_seconds))
            # Faults do not pile up: one starts at least FAULT_GAP_S after the previous one
            # recovered, so that each one's convergence is its own (long runs: at least its
            # planned gap after the previous one, see ChaosPlan.planned_gaps).
            gap = _gap(plan, faults, k)
            delay = max(started + fault.at, not_before + gap) - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # pacing the schedule, not waiting for an event
            if fault.kind == OFFSET_EXPIRY:
                assert offsets is not None
                resume = _allowed_until(faults, k, plan.fault_seconds)
                outlive_retention(fault, plan, producer, members, tail, offsets, resume)
            elif fault.kind == TOPIC_REWIND:
                resume = _allowed_until(faults, k, plan.fault_seconds) if plan.topology else 1.0
                recreate_under_backoff(fault, plan, producer, members, tail, topic, resume)
            elif fault.kind in TOPOLOGY_FAULTS:
                assert isinstance(cluster, TopologyCluster)
                inject_topology_fault(fault, plan, cluster, topic, tail)
            elif fault.kind in LINK_FAULTS:
                # In the background: the schedule goes on while the link is slow or a reply
                # is awaited, and the next fault keeps its time (``not_before`` stays), so
                # these faults take none of the fault phase's time.
                fault.t_fault = time.monotonic_ns()
                spell = threading.Thread(
                    target=_inject_link, args=(fault, plan, links), daemon=True
                )
                spell.start()
                spells.append(spell)
                at = (fault.t_fault - t0) / 1e9
                progress(f"  {fault.kind:<23} t={at:6.1f}s started in the background")
                continue
            else:
                _inject(fault, plan, cluster, members, tail, rng, snapshots)
            not_before = time.monotonic()
            progress(f"  {fault.describe(t0)}; {tail.poll()} records finished so far")
        producer.allow_until(1.0)
        producer.join(plan.fault_seconds + 240)
        assert not producer.is_alive(), "the producer never finished"
        if producer.failure is not None:
            raise producer.failure
        assert not producer.errors, f"production failed: {producer.errors[:3]}"
        result.produced = producer.delivered
        result.producer_pauses = producer.pauses
        assert result.produced == len(records), f"{result.produced} of {len(records)} delivered"
        _await_commits(plan, bootstrap, group, topic, tail, progress, members)
        for spell in spells:  # over during the settling, mostly: nothing added to the run
            spell.join()
        for fault in faults:
            if fault.kind in LINK_FAULTS:
                progress(f"  {fault.describe(t0)}")
        result.exit_codes = members.stop_all()
        result.elapsed_s = time.monotonic() - started
        # First, while the group's last commits are fresh: with the offset-expiry fault's
        # one-minute retention, the long reads below could outlast them.
        verify = run_verify(bootstrap, group, topic)
        dead = read_dlq(bootstrap, dlq, plan.partitions, committed=plan.exactly_once)
        outputs, unread = read_outputs(bootstrap, out, plan.partitions) if out else ([], [])
    finally:
        members.close()
        for link in links:
            link.close()
        for watch in (snapshots, offsets):
            if watch is not None:
                watch.close()
        if result.group_states is not None:
            result.group_states.close()
    result.verify_exit = verify.get("exit")  # type: ignore[assignment]
    result.verify_problems = [str(p.get("detail")) for p in verify.get("problems", [])]  # type: ignore[attr-defined, union-attr]
    result.verify_dead_letters = sum(verify.get("dead_letters", {}).values())  # type: ignore[attr-defined, union-attr]
    expected = dict.fromkeys(keys, plan.per_key)
    result.handovers = handovers_from_logs(members, clock_offset_ns)
    for fault in faults:
        if fault.kind == "member_stall" and fault.expired:
            fault.t_noticed = log_time(
                members, fault.target, EXPIRED_LOG, clock_offset_ns, after=fault.t_fault
            )
        elif fault.kind == PRODUCER_FENCE and fault.expired:
            fault.t_noticed = log_time(
                members, fault.target, FENCED_LOG, clock_offset_ns, after=fault.t_fault
            )
    expiries = session_expiries(members, faults, clock_offset_ns)
    result.unexpected_expiries = unexpected_expiries(expiries, faults, plan.session_timeout)
    result.other_expiries = [f"{name}: t={fence.t_resume}" for name, fence in expiries]
    fences = [*fences_from_logs(members, clock_offset_ns), *(fence for _, fence in expiries)]
    if plan.exactly_once:
        fences += role_fences(members, clock_offset_ns)
    analyse(
        read_journal(members.journal),
        plan,
        expected,
        members.killed,
        dead,
        result,
        fences,
        sent_at=producer.sent_at,
    )
    if out is not None:
        result.outputs = judge_outputs(
            outputs, records, {(letter.key, letter.seq) for letter in dead}
        )
        result.outputs.unread = unread
    delete_topics(
        AdminClient({"bootstrap.servers": bootstrap}), [topic, dlq, *([out] if out else [])]
    )
    return result


def _gap(plan: ChaosPlan, faults: list[Fault], k: int) -> float:
    """The least time between the recovery from fault ``k - 1`` and fault ``k``."""
    if not plan.planned_gaps or k == 0:
        return FAULT_GAP_S
    return max(FAULT_GAP_S, faults[k].at - faults[k - 1].at)


def _allowed_until(faults: list[Fault], k: int, fault_seconds: float) -> float:
    """How far (a fraction of the records) the topology plans let the producer run while fault
    ``k`` is injected: up to the next fault's planned time, so that a fault that takes long
    does not let the whole input through before the later ones. A producer fence is the
    exception: the member notices it only at its next transactional request, so it needs
    records to work on while the fault waits for that notice; without them an idle member
    never transacts and the fence looks unnoticed (the 30-minute partition-lease run saw it
    twice). It gets the records up to the fault after the next. So does a topic rewind, which
    waits for a handler to fail a record's first attempt (one record in about 300): the first
    key_shared run of the full plan found the group done with every record up to the next
    fault (a member kill planned 0.2 s later) and none failed in the 60 s it waited."""
    ahead = 2 if faults[k].kind in (PRODUCER_FENCE, TOPIC_REWIND) else 1
    upto = faults[k + ahead].at if k + ahead < len(faults) else fault_seconds
    return min(upto / fault_seconds, 1.0)


def _inject(
    fault: Fault,
    plan: ChaosPlan,
    cluster: LocalCluster | TopologyCluster,
    members: Members,
    tail: JournalTail,
    rng: random.Random,
    watch: CommitWatch | None,
) -> None:
    if fault.kind == "member_kill":
        name = _victim(plan, members, tail, rng)
        fault.target = name
        fault.pid, fault.t_fault = members.kill(name)
        if watch is not None:
            fault.committed = watch.snapshot()
        members.start(members.slot_of(name))
        fault.t_recovered = time.monotonic_ns()
    elif fault.kind == "member_stall":
        name = _busy_member(members, tail) or rng.choice(sorted(members.procs))
        proc = members.procs[name]
        fault.target, fault.pid = name, proc.pid
        os.kill(proc.pid, signal.SIGSTOP)
        # The stall starts when the kernel has stopped every thread, not when the signal was
        # sent: a handler thread may still journal a start in between, and a call started
        # before this instant is frozen with the process.
        _await_stopped(proc.pid)
        fault.t_fault = time.monotonic_ns()
        if watch is not None:  # frozen: what it had committed, as for a kill
            fault.committed = watch.snapshot()
        time.sleep(plan.stall_seconds)  # the stall itself: longer than the session timeout
        os.kill(proc.pid, signal.SIGCONT)
        fault.t_recovered = time.monotonic_ns()
        fault.expired = _await_log(members, name, EXPIRED_LOG, 30.0)
        if not fault.expired:
            fault.note = "session NOT expired: stalled calls are not excused"
    elif fault.kind == "broker_restart":
        assert isinstance(cluster, LocalCluster)
        fault.t_fault = time.monotonic_ns()
        cluster.stop_kafka(kill=True)
        cluster.start_kafka()
        fault.t_recovered = time.monotonic_ns()
    elif fault.kind == "zookeeper_restart":
        assert isinstance(cluster, LocalCluster)
        fault.t_fault = time.monotonic_ns()
        cluster.stop_zookeeper(kill=True)
        cluster.start_zookeeper()
        fault.t_recovered = time.monotonic_ns()
    elif fault.kind == PRODUCER_FENCE:
        _fence(fault, cluster.bootstrap_servers, members, tail, rng)
    else:
        raise ValueError(fault.kind)


def _inject_link(fault: Fault, plan: ChaosPlan, links: list[ZooKeeperProxy]) -> None:
    """One of LINK_FAULTS, on every member's link to ZooKeeper; returns when it is over."""
    try:
        if fault.kind == "zookeeper_latency":
            for link in links:
                link.delay(plan.zookeeper_latency)
            time.sleep(plan.session_timeout)  # the slow spell itself: longer than a session
            for link in links:
                link.heal()
            fault.t_recovered = time.monotonic_ns()
            fault.note = f"{plan.zookeeper_latency * 1000:.0f} ms each way"
        else:
            _lose_reply(fault, links)
    except Exception as e:  # the run goes on; the judge finds the fault unfinished
        fault.note = f"failed: {e!r}"


def _lose_reply(fault: Fault, links: list[ZooKeeperProxy], timeout: float = 30.0) -> None:
    """Lose the next reply to a member's write (whichever member writes next, through whichever
    server), then wait until a member connects again: kazoo resumes the session at once."""
    before = [len(link.lost_replies) for link in links]
    connections = sum(link.connections for link in links)
    for link in links:
        link.lose_next_write_reply()
    deadline = time.monotonic() + timeout
    try:
        while not (lost := [(r, link) for link, n in zip(links, before, strict=True)
                            for r in link.lost_replies[n:]]):  # fmt: skip
            if time.monotonic() > deadline:
                fault.note = "no member wrote to ZooKeeper"
                return
            time.sleep(0.05)
    finally:
        for link in links:
            link.disarm()
    (fault.t_fault, xid), link = min(lost, key=lambda found: found[0])
    fault.target = f"xid {xid} through {link.hosts}"
    while sum(link.connections for link in links) == connections:
        if time.monotonic() > deadline:
            fault.note = "nobody connected again"
            return
        time.sleep(0.05)
    fault.t_recovered = time.monotonic_ns()


def _fence(
    fault: Fault, bootstrap: str, members: Members, tail: JournalTail, rng: random.Random
) -> None:
    """Fence a busy member's transactional producer (exclusive mode: the active one's, through
    the role's id) and wait until the member logs that it was fenced: it notices at its next
    transactional request, within a commit interval while it has work."""
    name = _busy_member(members, tail) or rng.choice(sorted(members.procs))
    fault.target, fault.pid = name, members.procs[name].pid
    logged = len(members.log(name))
    fence_producer(bootstrap, fenced_id(members, name))
    fault.t_fault = time.monotonic_ns()
    deadline = time.monotonic() + 30.0
    while FENCED_LOG not in members.log(name)[logged:]:
        if time.monotonic() > deadline:
            fault.note = "the member never logged the fence"
            return
        time.sleep(0.1)
    fault.expired = True  # noticed: the member logged the fence
    fault.t_recovered = time.monotonic_ns()


def _victim(
    plan: ChaosPlan,
    members: Members,
    tail: JournalTail,
    rng: random.Random,
) -> str:
    """A random member; in exclusive mode the active one every other time, since killing a
    standby only tests the standby."""
    if plan.mode == "exclusive" and rng.random() < 0.5:
        busy = _busy_member(members, tail)
        if busy is not None:
            return busy
    return rng.choice(sorted(members.procs))


def _busy_member(members: Members, tail: JournalTail, timeout: float = 60.0) -> str | None:
    """A live member that is running handlers (the last to journal), so that a stall catches
    calls mid-way; in exclusive mode that is the active member. None when no live member
    journaled for ``timeout`` (the convergence bound): the caller picks one at random, and the
    judge reports the stretch as a convergence failure. Every live member's threads' stacks
    then go to its log, to show where they wait."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tail.poll()
        name = members.names_by_pid.get(tail.last_pid)
        if name in members.procs:
            return name
        time.sleep(0.1)
    print(f"no live member journaled anything for {timeout}s; their stacks are in their logs")
    members.dump_stacks()
    return None


def _await_stopped(pid: int, timeout: float = 10.0) -> None:
    """Until every thread of ``pid`` is in the stopped state (``T`` in /proc)."""
    deadline = time.monotonic() + timeout
    tasks = Path(f"/proc/{pid}/task")
    while time.monotonic() < deadline:
        states = []
        for task in tasks.iterdir():
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue  # a thread that exited meanwhile
            states.append(stat.rsplit(")", 1)[1].split()[0])
        if states and all(state in ("T", "t") for state in states):
            return
        time.sleep(0.001)
    raise AssertionError(f"pid {pid} did not stop within {timeout}s of SIGSTOP")


def _await_log(members: Members, name: str, text: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in members.log(name):
            return True
        time.sleep(0.2)
    return False


def _await_commits(
    plan: ChaosPlan,
    bootstrap: str,
    group: str,
    topic: str,
    tail: JournalTail,
    progress: Callable[[str], None],
    members: Members,
) -> None:
    """Wait (bounded) until the group committed every partition to its end."""
    watch = CommitWatch(bootstrap, group, topic, plan.partitions)
    deadline = time.monotonic() + plan.settle_seconds
    last_note = 0.0
    try:
        while not watch.at_end():
            now = time.monotonic()
            if now > deadline:
                logs = {n: members.log(n)[-2000:] for n in members.procs}
                raise AssertionError(
                    f"the group never committed to the end within {plan.settle_seconds}s: "
                    f"committed {watch.last}, ends {watch.ends}, {tail.poll()} records "
                    f"finished; member logs: {logs}"
                )
            if now - last_note > 10:
                progress(f"  settling: {tail.poll()} finished, committed {watch.last}")
                last_note = now
            time.sleep(0.5)
    finally:
        watch.close()
