"""The plan of a chaos run: its sizes and rates, and the faults it injects when."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.kafka.support.faults import fault_fraction

MODES = ("partition", "partition_leases", "key_shared", "exclusive")
GROUP_PROTOCOLS = ("classic", "consumer")
KAFKA_SESSION_MS = 6000  # the broker's group.min.session.timeout.ms: a dead member leaves fast
ZOMBIE_PID_BASE = -1  # incarnations after a fence get negative ids: no real pid collides
FAULT_GAP_S = 2.0
EXPIRED_LOG = "ZooKeeper session expired"
QUIET = 2  # librdkafka log level of the harness's own clients: a broker restart is expected
MEMBER_FAULTS = ("member_kill", "member_stall")
# Faults that take Kafka (or all of it) away for a while: a member may lose its partitions or
# its commits before they land, so redos around them are excused (see accounting.py).
BROKER_FAULTS = ("broker_restart", "leader_kill", "rolling_restart")
# The single ZooKeeper server's restart: every session is suspended until it is back.
SERVER_FAULTS = (*BROKER_FAULTS, "zookeeper_restart")
# One member of a three-member ensemble: the quorum stays, kazoo moves to another member and
# its session survives. Nothing is excused around these: no one may be fenced, nothing redone.
ENSEMBLE_FAULTS = ("zookeeper_follower_kill", "zookeeper_leader_kill")
# Faults of the members' links to ZooKeeper (a proxy in front of each server): every message
# late by ``ChaosPlan.zookeeper_latency`` each way for a while, or one write's reply lost after
# ZooKeeper applied the write (the connection drops with it; kazoo resumes the session). The
# sessions survive both: nothing is excused around these, as around ENSEMBLE_FAULTS.
LINK_FAULTS = ("zookeeper_latency", "zookeeper_lost_reply")
LATENCY_SHARE = 0.075
"""The latency each way, as a share of the session timeout. kazoo drops a connection whose ping
is not answered within ``read_timeout / 2`` minus a jitter of up to 0.4 s (read_timeout is
2/3 of the negotiated session timeout: ``kazoo/protocol/connection.py``), 0.93 s at a 4 s
session; a round trip of 0.15 session timeouts (0.6 s) leaves a third of a second for a loaded
machine, so the links stay up. It also sits at the edge of the session gate's liveness window
(a probe every 0.2 timeouts proves the session for 0.5), which the latency therefore works."""
# Exactly-once runs: another producer initialises a live member's transactional.id.
PRODUCER_FENCE = "producer_fence"
# Topology runs: every partition quiet for longer than the cluster's offset retention, then the
# member that worked last killed (tests/chaos/retention_fault.py).
OFFSET_EXPIRY = "offset_expiry"
TOPOLOGY_OFFSET_RETENTION_MIN = 1
"""The topology cluster's ``offsets.retention.minutes`` (checked every 2 s): Kafka expires a
member-less group's offset (``key_shared``, ``exclusive``) a minute after its last commit."""
EXACTLY_ONCE_MODES = ("partition", "partition_leases", "exclusive")
# The input topic deleted and created again while a record waits out its retry backoff: every
# member's fetch goes back to the new log's start (tests/chaos/rewind_fault.py).
TOPIC_REWIND = "topic_rewind"
REWIND_BACKOFF_MIN = 2.0
"""The least ``ChaosPlan.retry_backoff`` of a plan with rewinds: the deletion, the creation
and the members' first fetch of the new log must fit in one backoff (on the topology cluster:
about a second each on a loaded machine)."""


# -- the plan ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChaosPlan:
    """What one run does. The defaults are the short run of CI.

    :param mode: ``partition``, ``partition_leases`` (partition mode with ZooKeeper leases),
        ``key_shared`` or ``exclusive``.
    :param records: records produced, at an even pace over ``fault_seconds``.
    :param kill_every: a member is SIGKILLed every ``uniform(*kill_every)`` seconds.
    :param broker_restarts_at: when (shares of the fault phase) the broker is SIGKILLed and
        started again.
    :param stalls_at: when a member is SIGSTOPped past its session timeout, then SIGCONTed
        (coordinator modes).
    :param zookeeper_restarts_at: when ZooKeeper is SIGKILLed and started again (coordinator
        modes).
    :param fail_once_rate: share of records whose first attempt fails (a retry succeeds).
    :param fail_always_rate: share of records that fail every attempt (dead-lettered); must be
        0 in ``exclusive`` mode, where a poison record blocks its partition until released.
    :param topology: the run is on a :class:`~keyshared.dev.topology.TopologyCluster` (three
        brokers, a three-member ensemble); ``broker_restarts_at`` and
        ``zookeeper_restarts_at`` must then be empty (nothing restarts everything at once).
    :param leader_kills_at: (topology) when the leader broker of the busiest partition (the
        last record finished) is SIGKILLed; it stays down ``broker_down_seconds``, past the
        controller's ``broker.session.timeout.ms``, so leadership moves; then it restarts.
    :param rolling_restarts_at: (topology) when every broker in turn is stopped (SIGTERM: a
        controlled shutdown) and started again, each after the previous one is back in every ISR.
    :param zookeeper_failovers_at: (topology, coordinator modes) when a ZooKeeper follower is
        SIGKILLed and restarted, then the leader (an election); down ``session_timeout`` each.
    :param slow_keys: ``(share of keys, seconds per record)``.
    :param settle_seconds: bound on the wait for the group to commit everything after the
        fault phase.
    :param group_protocol: the members' ``group.protocol``: ``classic`` (the default: an
        elected member assigns, every rebalance waits for every member) or ``consumer``
        (KIP-848: the broker assigns each member on its heartbeats, with no group-wide
        barrier); the group's session is ``KAFKA_SESSION_MS`` either way.
    :param exactly_once: the members run ``--exactly-once`` and write each finished record's
        sequence number under its key to an output topic (``record.output``), which the
        judge reads back with ``read_committed`` (modes ``EXACTLY_ONCE_MODES``).
    :param zookeeper_latency_at: (coordinator modes) when every message between the members
        and ZooKeeper is delayed by :attr:`zookeeper_latency` each way, for a session timeout.
    :param zookeeper_lost_replies_at: (coordinator modes) when the next successful reply to a
        member's write is dropped with its connection, after ZooKeeper applied the write.
    :param fences_at: (exactly-once) when the harness fences a busy member's transactional
        producer: it starts a producer with the member's ``transactional.id`` (exclusive mode:
        the active role's) and calls ``init_transactions``.
    :param planned_gaps: each fault waits at least its planned gap after the previous one
        recovered (long runs). Otherwise only ``FAULT_GAP_S``: after a fault that took longer
        than planned the schedule catches up, member kills every 2 s, which the short runs
        want (saturated) and the long ones must not have: they judge recovery at the plan's
        rate (the 30-minute exclusive run of 2026-11-29 had 22 kills 2-5 s apart at
        t = 1,015-1,100 s, half at the active member, and no record finished meanwhile).
    :param offset_expiries_at: (topology) when the input stops for longer than the cluster's
        offset retention, after which the member that worked last is killed: a member-less
        group (``key_shared``, ``exclusive``) must keep its offsets, and resume from them.
    :param rewinds_at: when, once a member's handler failed the first attempt of a record
        that a retry will finish, the input topic is deleted and created again (same
        partitions, replication factor and configs) while the record waits out its backoff:
        the members' fetch goes back to the new log's start (``keyshared/kafka/rewinds.py``).
        Not with ``exactly_once`` (the outputs' judge knows no deleted records); needs
        ``retry_backoff``.
    :param retry_backoff: the members' ``--retry-backoff`` (seconds; None: the product's
        default). A rewind's plan sets it to at least :data:`REWIND_BACKOFF_MIN`, so that the
        record is still waiting when the fetch goes back.
    """

    mode: str
    members: int = 3
    partitions: int = 6
    keys: int = 1000
    records: int = 30_000
    fault_seconds: float = 30.0
    kill_every: tuple[float, float] = (4.0, 7.0)
    broker_restarts_at: tuple[float, ...] = (0.45,)
    stalls_at: tuple[float, ...] = (0.15,)
    zookeeper_restarts_at: tuple[float, ...] = (0.75,)
    session_timeout: float = 4.0
    commit_interval: float = 0.2
    workers: int = 8
    sleep_ms: str = "0,2"
    slow_keys: tuple[float, float] = (0.01, 0.2)
    fail_once_rate: float = 0.003
    fail_always_rate: float = 0.0005
    max_attempts: int = 3
    settle_seconds: float = 120.0
    seed: int = 14
    topology: bool = False
    leader_kills_at: tuple[float, ...] = ()
    rolling_restarts_at: tuple[float, ...] = ()
    zookeeper_failovers_at: tuple[float, ...] = ()
    broker_down_seconds: float = 8.0
    group_protocol: str = "classic"
    exactly_once: bool = False
    fences_at: tuple[float, ...] = ()
    zookeeper_latency_at: tuple[float, ...] = ()
    zookeeper_lost_replies_at: tuple[float, ...] = ()
    offset_expiries_at: tuple[float, ...] = ()
    rewinds_at: tuple[float, ...] = ()
    retry_backoff: float | None = None
    planned_gaps: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.group_protocol not in GROUP_PROTOCOLS:
            raise ValueError(
                f"group_protocol must be one of {GROUP_PROTOCOLS}, got {self.group_protocol!r}"
            )
        if self.mode == "exclusive" and self.fail_always_rate:
            raise ValueError("exclusive mode blocks on a poison record: fail_always_rate=0")
        if self.records < self.keys:
            raise ValueError("records must be at least keys (one per key)")
        topology_faults = self.leader_kills_at or self.rolling_restarts_at
        if (topology_faults or self.zookeeper_failovers_at) and not self.topology:
            raise ValueError("leader kills, rolling restarts and failovers need topology=True")
        if self.topology and (self.broker_restarts_at or self.zookeeper_restarts_at):
            raise ValueError("a topology run restarts single nodes, not the whole cluster")
        if self.exactly_once and self.mode not in EXACTLY_ONCE_MODES:
            raise ValueError(
                f"exactly_once needs a mode of {EXACTLY_ONCE_MODES}, not {self.mode!r}"
            )
        if self.offset_expiries_at and not self.topology:
            raise ValueError("offset expiries need the topology cluster's short retention")
        if self.rewinds_at and self.exactly_once:
            raise ValueError("rewinds delete outputs' sources: not with exactly_once")
        if self.rewinds_at and (self.retry_backoff or 0.0) < REWIND_BACKOFF_MIN:
            raise ValueError(
                f"a rewind must come while a record waits out its retry: retry_backoff >= "
                f"{REWIND_BACKOFF_MIN} s, got {self.retry_backoff}"
            )
        if self.fences_at and not self.exactly_once:
            raise ValueError("fences_at fences transactional producers: it needs exactly_once")

    @property
    def uses_zookeeper(self) -> bool:
        return self.mode != "partition"

    @property
    def zookeeper_links(self) -> bool:
        """Whether the members reach ZooKeeper through the harness's proxies (LINK_FAULTS)."""
        return self.uses_zookeeper and bool(
            self.zookeeper_latency_at or self.zookeeper_lost_replies_at
        )

    @property
    def zookeeper_latency(self) -> float:
        """Seconds each message to or from ZooKeeper is held in a latency fault."""
        return LATENCY_SHARE * self.session_timeout

    @property
    def per_key(self) -> int:
        return self.records // self.keys

    @property
    def stall_seconds(self) -> float:
        """Long enough for the ZooKeeper session (and, with leases, the Kafka group session)
        to expire, plus a margin for a loaded machine."""
        longest = self.session_timeout
        if self.mode == "partition_leases":
            longest = max(longest, KAFKA_SESSION_MS / 1000)
        return longest + 3.0

    def poison(self, key: bytes | None, seq: int) -> bool:
        return fault_fraction(key, seq) < self.fail_always_rate


@dataclass
class Fault:
    """One injected fault. Times are CLOCK_MONOTONIC ns, like the journals."""

    kind: str  # a kind of MEMBER_FAULTS, SERVER_FAULTS, ...; PRODUCER_FENCE, OFFSET_EXPIRY or
    # TOPIC_REWIND
    at: float  # planned, seconds into the fault phase
    target: str = ""  # member name for member faults, node for a topology's node faults
    pid: int = 0
    t_fault: int = 0  # SIGKILL / SIGSTOP sent, server killed
    t_recovered: int = 0  # replacement started, SIGCONT sent, server answering again
    expired: bool = False  # member_stall: the member's log confirms its session expired
    # (offset_expiry: a committed offset of the group went during the spell)
    # (producer_fence: the member's log confirms that it was fenced)
    t_noticed: int = 0  # member_stall: when the member logged that its session had expired
    # (producer_fence: when the member logged that its producer was fenced)
    in_flight: int = 0  # calls of the victim open at t_fault
    at_risk: int = 0  # ... plus calls it started within the commit window before t_fault
    resumed_s: float | None = None  # fault -> first affected key finished again
    converged_s: float | None = None  # fault -> every affected key finished again
    affected_keys: int = 0
    note: str = ""
    # member_kill in the Kafka-committing modes: the group's commits right after the SIGKILL,
    # partition -> (committed offset, finished offsets above it from the commit metadata)
    committed: dict[int, tuple[int, frozenset[int]]] | None = None
    redone_uncommitted: int = 0  # duplicates of the victim's records not committed at the kill
    # topic_rewind: the record that waited out its retry backoff at the deletion (key, seq)
    record: tuple[bytes | None, int] | None = None

    def describe(self, t0: int) -> str:
        at = (self.t_fault - t0) / 1e9
        what = f"{self.kind:<23} t={at:6.1f}s"
        if self.target:
            what += f" {self.target}" + (f" (pid {self.pid})" if self.pid else "")
        if self.t_recovered:
            what += f", back after {(self.t_recovered - self.t_fault) / 1e9:.1f}s"
        return what + (f" [{self.note}]" if self.note else "")


def fault_schedule(plan: ChaosPlan) -> list[Fault]:
    """The faults of a run in the order they happen (planned times; random but seeded)."""
    rng = random.Random(plan.seed)
    faults: list[Fault] = []
    faults += [Fault("broker_restart", at * plan.fault_seconds) for at in plan.broker_restarts_at]
    faults += [Fault("leader_kill", at * plan.fault_seconds) for at in plan.leader_kills_at]
    faults += [Fault("rolling_restart", at * plan.fault_seconds) for at in plan.rolling_restarts_at]
    if plan.uses_zookeeper:
        for at in plan.zookeeper_failovers_at:
            faults.append(Fault("zookeeper_follower_kill", at * plan.fault_seconds))
            faults.append(Fault("zookeeper_leader_kill", at * plan.fault_seconds + 0.001))
        faults += [Fault("member_stall", at * plan.fault_seconds) for at in plan.stalls_at]
        faults += [
            Fault("zookeeper_restart", at * plan.fault_seconds) for at in plan.zookeeper_restarts_at
        ]
        faults += [
            Fault("zookeeper_latency", at * plan.fault_seconds) for at in plan.zookeeper_latency_at
        ]
        faults += [
            Fault("zookeeper_lost_reply", at * plan.fault_seconds)
            for at in plan.zookeeper_lost_replies_at
        ]
    faults += [Fault(PRODUCER_FENCE, at * plan.fault_seconds) for at in plan.fences_at]
    faults += [Fault(OFFSET_EXPIRY, at * plan.fault_seconds) for at in plan.offset_expiries_at]
    faults += [Fault(TOPIC_REWIND, at * plan.fault_seconds) for at in plan.rewinds_at]
    at = rng.uniform(*plan.kill_every) / 2
    while at < plan.fault_seconds - 1.0:
        faults.append(Fault("member_kill", at))
        at += rng.uniform(*plan.kill_every)
    return sorted(faults, key=lambda f: f.at)
