"""The Kafka brokers of the local cluster: KRaft nodes that are each broker and controller.

This module knows Kafka's files and flags; process control and waiting live in `cluster.py`.
Every setting that differs from Kafka's default is in `broker_settings`, with the reason.
"""

from __future__ import annotations

import base64
import logging
import re
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from keyshared.dev.errors import StartupError
from keyshared.dev.files import ServerFiles
from keyshared.dev.jars import classpath
from keyshared.dev.logconfig import write_log4j2_config
from keyshared.dev.ports import LOOPBACK, accepts_connections

KafkaFiles = ServerFiles  # the layout is shared; the alias keeps signatures readable

__all__ = [
    "KafkaFiles",
    "acl_settings",
    "answers_metadata",
    "broker_settings",
    "format_command",
    "format_storage",
    "is_formatted",
    "kafka_files",
    "listener_settings",
    "new_cluster_id",
    "sasl_client_config",
    "sasl_settings",
    "server_command",
    "write_config",
]

_NODE_ID = 1
# A metadata probe must not print librdkafka's connection errors on the user's terminal.
_probe_logger = logging.getLogger("keyshared.dev.kafka.probe")
_probe_logger.addHandler(logging.NullHandler())
_probe_logger.propagate = False


def kafka_files(runtime_dir: Path) -> KafkaFiles:
    """Where this server's files live inside ``runtime_dir``."""
    return ServerFiles.in_runtime(runtime_dir, "kafka", "server.properties")


def is_formatted(files: KafkaFiles) -> bool:
    """Whether KRaft storage exists (StorageTool writes meta.properties into the log dir)."""
    return (files.data / "meta.properties").is_file()


def listener_settings(broker_port: int, controller_port: int) -> dict[str, str]:
    """The listener entries of server.properties: one PLAINTEXT client listener and the
    controller listener, both on loopback.

    Kept apart from :func:`broker_settings` so that a variant (SASL, see :func:`sasl_settings`;
    an extra listener behind a proxy) replaces exactly these keys and nothing else.
    """
    return {
        # Loopback only: a dev broker must not be reachable from the network.
        "listeners": f"PLAINTEXT://{LOOPBACK}:{broker_port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    }


def broker_settings(
    files: KafkaFiles,
    broker_port: int,
    controller_port: int,
    *,
    node_id: int = _NODE_ID,
    voters: Mapping[int, int] | None = None,
    replicas: int = 1,
) -> dict[str, str]:
    """The broker's server.properties, each deviation from Kafka's defaults with its reason.

    :param node_id: this node's KRaft id.
    :param voters: node id -> controller port of every controller of the quorum (default:
        this node alone). Every node of the local cluster is broker and controller.
    :param replicas: replication factor of new topics and internal topics; ``min.insync.replicas``
        is one less (at least 1), so a topic keeps taking ``acks=all`` writes with one replica
        down, Kafka's usual production setting (RF 3, min ISR 2).
    """
    voters = dict(voters or {node_id: controller_port})
    min_isr = str(max(1, replicas - 1))
    settings = {
        # KRaft combined mode: each JVM is broker and controller, no ZooKeeper involved.
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        # A static voter set: ports live only in this file (not in the formatted metadata), so
        # a warm start may move to new ports if the old ones were taken meanwhile.
        "controller.quorum.voters": ",".join(
            f"{voter}@{LOOPBACK}:{port}" for voter, port in sorted(voters.items())
        ),
        **listener_settings(broker_port, controller_port),
        "log.dirs": str(files.data),
        # keyshared creates its topics explicitly; tests rely on a typo failing, not creating.
        "auto.create.topics.enable": "false",
        # Every internal topic and every default must fit the brokers there are.
        "default.replication.factor": str(replicas),
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": str(replicas),
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": min_isr,
        # Fewer internal partitions (default 50): the first group or transaction on a fresh
        # broker creates them, and 50 of them cost seconds on a two-core laptop or CI runner.
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.num.partitions": "10",
        # A killed transactional member's open transaction holds every read_committed reader
        # until it is aborted: check for timed-out transactions every second (default 10 s).
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "num.partitions": "1",
        # No 3 s wait for more members before the first classic-protocol rebalance.
        "group.initial.rebalance.delay.ms": "0",
        # Both group protocols on (Kafka 4.2's default, spelled out because keyshared is tested
        # with `group.protocol=classic` and with `consumer`, KIP-848).
        "group.coordinator.rebalance.protocols": "classic,consumer,streams",
        # KIP-848 lets the broker, not the client, choose session and heartbeat times; the 45 s
        # default session would make every crash test wait 45 s for the group to notice.
        "group.consumer.min.session.timeout.ms": "6000",
        "group.consumer.session.timeout.ms": "10000",
        "group.consumer.min.heartbeat.interval.ms": "1000",
        "group.consumer.heartbeat.interval.ms": "2000",
        # Compacted topics are used in tests: keep the cleaner on and let it look every second
        # (default 15 s) so a test of compaction does not idle.
        "log.cleaner.enable": "true",
        "log.cleaner.backoff.ms": "1000",
    }
    if len(voters) > 1:
        settings.update({
            # Several brokers: a SIGKILLed one is fenced (its partitions get new leaders, it
            # leaves the ISRs, so acks=all writes go on) after 6 s instead of 9 s.
            "broker.session.timeout.ms": "6000",
            "broker.heartbeat.interval.ms": "1000",
            # A follower that stops fetching leaves the ISR after 10 s (default 30 s): acks=all
            # producers wait for the ISR, and a crash test should not wait half a minute.
            "replica.lag.time.max.ms": "10000",
        })  # fmt: skip
    return settings


_SASL_NAME = re.compile(r"[A-Za-z0-9._-]+")


def sasl_settings(
    users: Mapping[str, str], broker_port: int, controller_port: int
) -> dict[str, str]:
    """Overrides that make the client listener SASL_PLAINTEXT with PLAIN, for these users.

    Why: keyshared creates many Kafka clients (consumer, DLQ and key-state producers, admin and
    reader clients, the ops commands, Spark), and only a broker that refuses unauthenticated
    clients proves that security settings reach every one of them. The controller listener
    stays PLAINTEXT (it is internal to the node). The first user is the broker's own identity
    for inter-broker requests (transaction markers go to itself) and for the readiness probe.
    :func:`acl_settings` adds an authorizer.

    :raises ValueError: no users, or a name or password that would break the JAAS line.
    """
    if not users:
        raise ValueError("SASL needs at least one user")
    for name, password in users.items():
        if not (_SASL_NAME.fullmatch(name) and _SASL_NAME.fullmatch(password)):
            raise ValueError(f"SASL user {name!r}: names and passwords must match [A-Za-z0-9._-]+")
    broker_user, broker_password = next(iter(users.items()))
    accounts = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return {
        "listeners": (
            f"SASL_PLAINTEXT://{LOOPBACK}:{broker_port},CONTROLLER://{LOOPBACK}:{controller_port}"
        ),
        "advertised.listeners": f"SASL_PLAINTEXT://{LOOPBACK}:{broker_port}",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{broker_user}" password="{broker_password}" {accounts};'
        ),
    }


def acl_settings(broker_user: str) -> dict[str, str]:
    """Overrides that turn on KRaft's ACL authorizer, open to everyone but what an ACL names.

    Why: only a broker that refuses a request for the member's rights shows what librdkafka
    reports then (a DENY ACL on one topic, say), and what keyshared makes of it. With
    ``allow.everyone.if.no.acl.found`` a broker without ACLs behaves as before, so tests that
    set none see no difference. Super users skip the ACLs: the broker's own SASL identity
    (inter-broker requests, transaction markers to itself) and ``User:ANONYMOUS``, the
    principal of the PLAINTEXT controller listener, over which the broker half of this
    combined node registers and heartbeats with its controller half.
    """
    return {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "super.users": f"User:{broker_user};User:ANONYMOUS",
    }


def sasl_client_config(user: str, password: str) -> dict[str, str]:
    """librdkafka properties that authenticate as ``user`` on a :func:`sasl_settings` listener."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
    }


def write_config(
    files: KafkaFiles,
    broker_port: int,
    controller_port: int,
    overrides: Mapping[str, str] | None = None,
    sasl_users: Mapping[str, str] | None = None,
    *,
    node_id: int = _NODE_ID,
    voters: Mapping[int, int] | None = None,
    replicas: int = 1,
) -> None:
    """Write server.properties (settings, SASL when users are given, then `overrides`) and the
    Log4j 2 file; ``node_id``, ``voters`` and ``replicas`` as in :func:`broker_settings`."""
    settings = broker_settings(
        files, broker_port, controller_port, node_id=node_id, voters=voters, replicas=replicas
    )
    if sasl_users:
        settings.update(sasl_settings(sasl_users, broker_port, controller_port))
    settings.update(overrides or {})
    files.home.mkdir(parents=True, exist_ok=True)
    files.data.mkdir(parents=True, exist_ok=True)
    body = "".join(f"{key}={value}\n" for key, value in settings.items())
    files.config.write_text("# Written by keyshared dev on every start; edits are lost.\n" + body)
    write_log4j2_config(
        files.log4j_config,
        files.log_file,
        # Per-request and state-change logs are noise for a developer reading the log.
        {"kafka.request.logger": "WARN", "state.change.logger": "WARN"},
    )


def format_storage(
    java: str, jars_dir: Path, files: KafkaFiles, cluster_id: str | None = None
) -> None:
    """Format KRaft storage once (Kafka's `StorageTool format`), with ``cluster_id`` or a fresh
    one: the nodes of one cluster must share it.

    A short-lived JVM: the client compiler and a small serial heap start it fastest.
    """
    command = format_command(java, jars_dir, files, cluster_id)
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0 or not is_formatted(files):
        output = (result.stdout + result.stderr).strip()[-2000:]
        raise StartupError(
            f"formatting Kafka storage in {files.data} failed (exit {result.returncode}):\n"
            f"{output}",
            files.log_file,
        )


def format_command(
    java: str, jars_dir: Path, files: KafkaFiles, cluster_id: str | None = None
) -> list[str]:
    """Kafka's `StorageTool format` command line, with ``cluster_id`` or a fresh one (also run
    in the test containers, where no Python runs next to the broker)."""
    return [
        java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={files.log4j_config}",
        "-cp", classpath(jars_dir),
        "kafka.tools.StorageTool", "format",
        "--cluster-id", cluster_id or new_cluster_id(),
        "--config", str(files.config),
    ]  # fmt: skip


def server_command(java: str, jars_dir: Path, files: KafkaFiles, heap_mb: int) -> list[str]:
    """The broker's `java` command line (the JVM flags of Kafka's own kafka-server-start.sh)."""
    return [
        java, f"-Xmx{heap_mb}m",
        "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
        "-XX:+ExplicitGCInvokesConcurrent",
        # A broker out of memory should die visibly, not limp along.
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={files.log4j_config}",
        f"-Dkafka.logs.dir={files.log_file.parent}",
        "-cp", classpath(jars_dir),
        "kafka.Kafka", str(files.config),
    ]  # fmt: skip


def answers_metadata(
    bootstrap_servers: str,
    port: int,
    timeout: float,
    client_config: Mapping[str, Any] | None = None,
) -> bool:
    """Whether the broker answers a metadata request listing at least one broker.

    A TCP probe comes first so no client is built (and no connection error logged) while the
    port is still closed. ``client_config`` adds properties such as SASL credentials.
    """
    if not accepts_connections(port):
        return False
    config: dict[str, Any] = {
        **(client_config or {}),
        "bootstrap.servers": bootstrap_servers,
        "logger": _probe_logger,
    }
    admin = AdminClient(config)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return len(metadata.brokers) > 0


def new_cluster_id() -> str:
    """A Kafka `Uuid` string: 16 random bytes, URL-safe base64 without padding.

    Like Kafka's own `Uuid.randomUuid()`, never one that starts with a dash: the storage
    tool's argument parser would read such an id as an option (1 start in 64 failed CI so).
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text
