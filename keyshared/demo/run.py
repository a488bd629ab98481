"""The demo's steps, in order: topics, consumers, orders, live progress, checks.

Consumers start before the orders are produced, so the run shows what a live service sees:
records arriving while members process them. Every check afterwards uses an independent
source: the verifier saw every handler call, the DLQ is read back from Kafka, and the group's
committed offsets are compared with the end offsets.
"""

from __future__ import annotations

import gc
import threading
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient
from rich.console import Console

from keyshared.core.poison import RetryPolicy
from keyshared.demo.checks import DeadLetter, committed_gaps, read_dead_letters
from keyshared.demo.clientlog import CLIENT_LOG
from keyshared.demo.handler import OrderHandler
from keyshared.demo.progress import DemoProgress
from keyshared.demo.verifier import DemoVerdict, OrderVerifier
from keyshared.demo.workload import OrderWorkload, ProducedSet
from keyshared.dev.topics import create_topic
from keyshared.errors import KeySharedError

__all__ = ["DemoOutcome", "DemoSettings", "run_demo"]


@dataclass(frozen=True)
class DemoSettings:
    records: int = 20_000
    keys: int = 500
    partitions: int = 6
    members: int = 2
    workers: int = 32
    handler_ms: float = 5.0
    poison_every: int = 2_500
    max_attempts: int = 3
    timeout: float = 300.0
    metrics_port: int | None = 0
    mode: str = "partition"  # key_shared: members split keys; exclusive: one active member
    zookeeper: str | None = None
    partition_leases: bool = False  # partition mode: a ZooKeeper lease per partition


@dataclass
class DemoOutcome:
    """Everything the summary reports."""

    settings: DemoSettings
    topic: str
    dlq_topic: str
    group: str
    produced: ProducedSet
    verdict: DemoVerdict
    dead_letters: list[DeadLetter]
    commit_gaps: dict[int, int]
    elapsed_s: float
    mean_handler_s: float
    metrics_url: str | None
    timed_out: bool
    lost: list[tuple[str, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.lost and self.verdict.violations == 0 and not self.timed_out


def _coordination(settings: DemoSettings) -> dict[str, object]:
    """A member's mode options, with its own ZooKeeper session when the mode coordinates."""
    coordinated = settings.mode in ("key_shared", "exclusive") or settings.partition_leases
    if not coordinated:
        return {}
    from coordinator import ZooKeeperCoordinator

    if settings.zookeeper is None:
        raise KeySharedError(f"--mode {settings.mode} needs ZooKeeper (the local cluster has one)")
    return {"mode": settings.mode, "coordinator": ZooKeeperCoordinator(settings.zookeeper)}


def _poison_policy(settings: DemoSettings) -> str:
    """dead_letter, except in exclusive mode, where only blocking policies keep strict order."""
    return "block_and_dead_letter" if settings.mode == "exclusive" else "dead_letter"


def run_demo(bootstrap: str, settings: DemoSettings, console: Console) -> DemoOutcome:
    from keyshared.consumer.key_shared_consumer import KeySharedConsumer

    run_id = uuid.uuid4().hex[:6]
    topic, group = f"keyshared-demo-{run_id}", f"keyshared-demo-{run_id}"
    dlq_topic = f"{topic}.dlq"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(admin, topic, settings.partitions)
    create_topic(admin, dlq_topic, 1)
    console.print(
        f"Topic [bold]{topic}[/] ({settings.partitions} partition"
        f"{'' if settings.partitions == 1 else 's'}) and its DLQ "
        f"[bold]{dlq_topic}[/]; group [bold]{group}[/]"
    )
    verifier = OrderVerifier()
    handler = OrderHandler(verifier, settings.handler_ms / 1000, settings.max_attempts)
    retry = RetryPolicy(max_attempts=settings.max_attempts, initial_backoff=0.05, max_backoff=0.5)
    members = [
        KeySharedConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": f"demo-{i + 1}",
                "logger": CLIENT_LOG,
            },
            [topic],
            handler,
            workers=settings.workers,
            poison=_poison_policy(settings),
            dlq_topic=dlq_topic,
            retry=retry,
            metrics_port=settings.metrics_port if i == 0 else None,
            **_coordination(settings),  # type: ignore[arg-type]
        )
        for i in range(settings.members)
    ]
    threads = [
        threading.Thread(target=m.run, name=f"demo-member-{i}", daemon=True)
        for i, m in enumerate(members)
    ]
    for thread in threads:
        thread.start()
    for member in members:
        member.wait_started(60)
    metrics_url = members[0].metrics_url
    how = {
        "key_shared": f"key_shared: {settings.members} members split {settings.partitions} "
        "partition(s) by key slot through ZooKeeper",
        "exclusive": f"exclusive: 1 active member of {settings.members} (a ZooKeeper lock), "
        "the others standbys; strictly serial per partition",
    }.get(settings.mode, f"{settings.members} keyshared members")
    if settings.partition_leases:
        how += " with ZooKeeper partition leases"
    console.print(
        f"{how} x {settings.workers} workers, handler {settings.handler_ms:g} ms, poison "
        f"policy {_poison_policy(settings)}"
        + (f"; metrics at {metrics_url}" if metrics_url else "")
    )
    workload = OrderWorkload(settings.records, settings.keys, settings.poison_every)
    producer = threading.Thread(target=workload.produce, args=(bootstrap, topic), daemon=True)
    began = time.monotonic()
    producer.start()
    timed_out = _watch(console, settings, workload, verifier, producer)
    elapsed = time.monotonic() - began
    for member in members:
        member.stop()
    for thread in threads:
        thread.join(60)
    # The members' clients hold reference cycles; collect them now so their connections close
    # before the cluster may be stopped (else librdkafka logs reconnect errors to stderr).
    members.clear()
    gc.collect()
    produced = workload.produced
    letters = read_dead_letters(bootstrap, dlq_topic, len(produced.poison))
    verdict = verifier.verdict()
    outcome = DemoOutcome(
        settings,
        topic,
        dlq_topic,
        group,
        produced,
        verdict,
        letters,
        committed_gaps(bootstrap, group, topic, settings.partitions),
        elapsed,
        handler.mean_latency_s,
        metrics_url,
        timed_out,
    )
    dead = {(letter.key, letter.seq) for letter in letters}
    outcome.lost = [
        (key, seq)
        for key, count in produced.per_key.items()
        for seq in range(count)
        if seq not in verdict.succeeded.get(key, ()) and (key, seq) not in dead
    ]
    return outcome


def _watch(
    console: Console,
    settings: DemoSettings,
    workload: OrderWorkload,
    verifier: OrderVerifier,
    producer: threading.Thread,
) -> bool:
    """Refresh the display until every order succeeded or was dead-lettered; True on timeout."""
    deadline = time.monotonic() + settings.timeout
    with DemoProgress(console, settings.records) as progress:
        while True:
            produced = workload.produced
            dead = progress.dead_letters()
            processed = verifier.ok_count + dead
            progress.update(produced.acked, processed, verifier.in_flight, dead)
            finished = not producer.is_alive() and processed >= produced.acked
            if finished or time.monotonic() > deadline:
                return not finished
            time.sleep(0.1)
