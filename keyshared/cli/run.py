"""`keyshared run MODULE:FUNC`: a consumer around a handler, until SIGINT/SIGTERM."""

from __future__ import annotations

import faulthandler
import gc
import importlib
import logging
import math
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import click

from keyshared.cli.options import (
    bootstrap_servers_option,
    client_properties_option,
    group_option,
    parse_properties,
    zookeeper_auth,
    zookeeper_option,
)
from keyshared.core.modes import MODES, Mode
from keyshared.core.poison import PoisonPolicy, RetryPolicy
from keyshared.errors import KeySharedError
from keyshared.settings import ConsumerOptions

__all__ = ["GC_YOUNG_THRESHOLD", "load_handler", "run", "tune_collector"]

log = logging.getLogger("keyshared.run")
_DEFAULTS = ConsumerOptions()  # the CLI's defaults are the library's, from one place
# Net allocations of container objects between two collections of the youngest generation
# (CPython's default: 700). Every record holds three tracked objects while it is in the window
# (its message, its entry, the work item), so at 700 a poll batch of 1,000 records starts about
# four young collections, whose survivors are rescanned by the older ones: 6-7 % of the CPU on
# the no-op path, and none of it ever frees anything (the per-record objects form no cycles).
# 10,000 keeps a young collection to a few milliseconds and takes that share to about 1 %
# (docs/benchmarks.md, "The cyclic garbage collector").
GC_YOUNG_THRESHOLD = 10_000


def _retry_backoff(value: float) -> float:
    """``--retry-backoff``: a wait, so a finite number of seconds, 0 (retry at once) or more.
    click's float type takes ``nan`` and ``inf``, which RetryPolicy would refuse only once the
    consumer is built, in a traceback rather than a usage error."""
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise click.BadParameter(
            f"must be a finite number of seconds, 0 or more; got {value}",
            param_hint="--retry-backoff",
        )
    return value


def load_handler(spec: str, param_hint: str = "HANDLER") -> Callable[..., Any]:
    """Import ``module:function`` (or any callable object) from the current directory (like
    ``python -m``)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(f"{spec!r} is not MODULE:FUNCTION", param_hint=param_hint)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}", param_hint=param_hint
        ) from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise click.BadParameter(f"{module_name!r} has no {attr!r}", param_hint=param_hint)
    if not callable(target):
        raise click.BadParameter(f"{spec} is not callable", param_hint=param_hint)
    return target  # type: ignore[no-any-return]


@click.command(context_settings={"show_default": True})
@click.argument("handler", metavar="MODULE:FUNC")
@bootstrap_servers_option()
@group_option("Consumer group id.")
@click.option(
    "--topic", "-t", "topics", multiple=True, required=True, help="Topic to consume (repeatable)."
)
@click.option(
    "--workers",
    "-w",
    type=click.IntRange(min=1),
    default=_DEFAULTS.workers,
    help="Worker threads (or concurrent coroutines for async handlers).",
)
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default=Mode(_DEFAULTS.mode).value,
    help="Assignment mode (key_shared needs --zookeeper).",
)
@zookeeper_option(
    default=None, help="ZooKeeper hosts for coordination (default: $KEYSHARED_ZOOKEEPER)."
)
@click.option(
    "--partition-leases/--no-partition-leases",
    default=None,
    help="partition mode: hold a ZooKeeper lease per partition, so a new owner never overlaps "
    "the old one's stragglers [default: on when --zookeeper is given on the command line; "
    "$KEYSHARED_ZOOKEEPER alone does not turn it on].",
)
@click.option(
    "--zookeeper-auth",
    envvar="KEYSHARED_ZOOKEEPER_AUTH",
    callback=zookeeper_auth,
    default=None,
    help="Digest USER:PASSWORD that guards the group's znodes ($KEYSHARED_ZOOKEEPER_AUTH).",
)
@click.option(
    "--session-timeout",
    type=click.FloatRange(min=1.0),
    default=10.0,
    show_default=True,
    help="ZooKeeper session timeout in seconds: how long a silent member keeps its ranges.",
)
@click.option(
    "--poison",
    type=click.Choice([p.value for p in PoisonPolicy]),
    default=None,
    help="What happens after the last attempt [default: dead_letter; block_and_dead_letter "
    "in exclusive mode].",
)
@click.option(
    "--dlq-topic", default=_DEFAULTS.dlq_topic, help="DLQ topic; {topic} is the source topic."
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    default=_DEFAULTS.retry.max_attempts,
    help="Attempts per record, the first included.",
)
@click.option(
    "--retry-backoff",
    type=float,
    callback=lambda ctx, param, value: _retry_backoff(value),
    default=_DEFAULTS.retry.initial_backoff,
    show_default=True,
    metavar="SECONDS",
    help="Seconds before a failed record's first retry; each later one waits twice as long "
    f"(at most {_DEFAULTS.retry.max_backoff:g} s, or this if longer), give or take 20 % at "
    "random. Only that record's key waits meanwhile.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve /metrics, /hotkeys and the probes /healthz, /readyz on 127.0.0.1:PORT "
    "(0 picks a free port).",
)
@click.option(
    "--metrics-host", default=_DEFAULTS.metrics_host, help="Address for the metrics endpoint."
)
@click.option(
    "--key-filter",
    "key_filters",
    multiple=True,
    help="Only process keys matching this glob (repeatable); others are skipped.",
)
@click.option(
    "--drain-timeout",
    type=float,
    default=_DEFAULTS.drain_timeout,
    help="Seconds to wait for in-flight records on revoke and shutdown.",
)
@click.option(
    "--stuck-after",
    type=float,
    default=_DEFAULTS.stuck_after,
    help="Seconds before the record holding a partition back is reported stuck "
    "(a warning, and /readyz fails).",
)
@click.option(
    "--wedged-after",
    type=float,
    default=None,
    help="Seconds without a poll-loop iteration before /healthz fails "
    "[default: drain timeout + 3 x startup timeout].",
)
@click.option(
    "--commit-interval",
    type=click.FloatRange(min=0.01),
    default=_DEFAULTS.commit_interval,
    help="Seconds between asynchronous commits of the safe cursors.",
)
@click.option(
    "--startup-timeout",
    type=click.FloatRange(min=0.1),
    default=_DEFAULTS.startup_timeout,
    help="Seconds to wait for the broker before failing with a clear error.",
)
@click.option(
    "--key-deserializer",
    default=None,
    metavar="MODULE:OBJ",
    help="Key deserializer: a bytes -> object function or a confluent-kafka Deserializer "
    "(e.g. an AvroDeserializer built in MODULE).",
)
@click.option(
    "--value-deserializer", default=None, metavar="MODULE:OBJ", help="As --key-deserializer."
)
@click.option(
    "--tracing/--no-tracing",
    default=False,
    help="OpenTelemetry span per handler call, to the global TracerProvider (needs the otel "
    "extra; configure the SDK in the handler module or run under opentelemetry-instrument).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=None,
    help="Call the handler with a list of up to N records (never two of one key) instead of "
    "one record; raising keyshared.BatchError fails only the records it names.",
)
@click.option(
    "--batch-linger",
    type=click.FloatRange(min=0.0),
    default=_DEFAULTS.batch_linger,
    help="With --batch-size: seconds a worker waits for a short batch to fill (0: never waits; "
    "under load batches fill while the previous one runs).",
)
@click.option(
    "--exactly-once/--at-least-once",
    default=False,
    help="Commit each record's outputs (record.output.produce) and dead letters in one Kafka "
    "transaction with its offset: read_committed readers see them exactly once.",
)
@click.option(
    "--transactional-id",
    default=None,
    help="With --exactly-once: this member's transactional.id, one per replica (e.g. the pod "
    "name, so a restart aborts its predecessor's open transaction at once; never one for all "
    "replicas: they would fence each other) [default: unique per run]. Not in exclusive mode "
    "with --zookeeper: there the active role has the one id keyshared-<group>-active.",
)
@click.option(
    "--transaction-timeout",
    type=click.FloatRange(min=0.0, min_open=True),
    default=_DEFAULTS.transaction_timeout,
    help="With --exactly-once: seconds (transaction.timeout.ms) before the broker aborts the "
    "open transaction of a member that died; at most the broker's transaction.max.timeout.ms.",
)
@click.option(
    "--max-held-output-bytes",
    type=click.IntRange(min=1),
    default=_DEFAULTS.max_held_output_bytes,
    help="With --exactly-once: bytes of outputs waiting for a transaction at which fetching "
    "pauses (until under half), and the most one transaction carries (a larger commit is "
    "split by partition).",
)
@client_properties_option(
    metavar="KEY=VALUE",
    help="librdkafka property passed through (repeatable), e.g. -X fetch.max.bytes=1048576.",
)
@click.option(
    "--log-level", default="INFO", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"])
)
@click.option(
    "--gc-tuning/--no-gc-tuning",
    envvar="KEYSHARED_GC_TUNING",
    default=True,
    help="Tune this process's cyclic garbage collector for a consumer once it is built: "
    "freeze the start-up objects out of its scans and collect the youngest generation every "
    f"{GC_YOUNG_THRESHOLD:,} net allocations instead of 700 ($KEYSHARED_GC_TUNING=0 to leave "
    "Python's settings, e.g. for a handler that makes many reference cycles).",
)
def run(
    handler: str,
    bootstrap_servers: str,
    group: str,
    topics: tuple[str, ...],
    workers: int,
    mode: str,
    zookeeper: str | None,
    partition_leases: bool | None,
    zookeeper_auth: tuple[str, str] | None,
    session_timeout: float,
    poison: str | None,
    dlq_topic: str,
    max_attempts: int,
    retry_backoff: float,
    metrics_port: int | None,
    metrics_host: str,
    key_filters: tuple[str, ...],
    drain_timeout: float,
    stuck_after: float,
    wedged_after: float | None,
    commit_interval: float,
    startup_timeout: float,
    key_deserializer: str | None,
    value_deserializer: str | None,
    tracing: bool,
    batch_size: int | None,
    batch_linger: float,
    exactly_once: bool,
    transactional_id: str | None,
    transaction_timeout: float,
    max_held_output_bytes: int,
    properties: tuple[str, ...],
    log_level: str,
    gc_tuning: bool,
) -> None:
    """Consume TOPIC with the handler MODULE:FUNC, in parallel per key, in order per key.

    The handler gets a keyshared.Record (with --batch-size, a list of them) and may be a plain
    or an async function; raising means failure (retried, then the --poison policy applies).
    On SIGINT/SIGTERM the consumer stops fetching, drains what is in flight, commits and
    exits; a second signal exits at once.

    Example: keyshared run myapp:handle -g orders -t orders --workers 64 --poison park
    """
    from keyshared.consumer.key_shared_consumer import KeySharedConsumer

    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Signals first: a SIGTERM while the handler module imports or the consumer is built is a
    # clean stop too, not a death by the default action.
    consumer: KeySharedConsumer | None = None
    stop_requested = False
    signals_seen = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal signals_seen, stop_requested
        signals_seen += 1
        if signals_seen > 1:
            log.error("second %s: exiting without draining", signal.Signals(signum).name)
            os._exit(130)
        log.info(
            "%s: draining and committing (send again to exit at once)", signal.Signals(signum).name
        )
        stop_requested = True
        if consumer is not None:
            consumer.stop()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    # A member that seems stuck: `kill -USR2 <pid>` prints every thread's stack to stderr
    # (docs/operations.md), without stopping it.
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    fn = load_handler(handler)
    deserializers = [
        None if spec is None else load_handler(spec, hint)
        for spec, hint in ((key_deserializer, "--key-deserializer"),
                           (value_deserializer, "--value-deserializer"))
    ]  # fmt: skip
    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "group.id": group}
    config.update(parse_properties(properties))
    zk = None
    if _uses_zookeeper(mode, zookeeper, partition_leases):
        if not zookeeper:
            raise click.UsageError(
                f"--mode {mode}{' --partition-leases' if mode == 'partition' else ''} needs "
                "--zookeeper (or $KEYSHARED_ZOOKEEPER)"
            )
        from coordinator import ZooKeeperCoordinator

        zk = ZooKeeperCoordinator(
            zookeeper,
            auth=zookeeper_auth,
            session_timeout=session_timeout,
            connect_timeout=startup_timeout,
        )
    elif mode == "exclusive":
        log.warning(
            "--mode exclusive without --zookeeper: serial per partition in this member only; "
            "nothing keeps a second member from consuming too (no single active member)"
        )
    try:
        consumer = KeySharedConsumer(
            config,
            list(topics),
            fn,
            coordinator=zk,
            workers=workers,
            mode=mode,
            poison=poison,
            dlq_topic=dlq_topic,
            retry=RetryPolicy(
                max_attempts=max_attempts,
                initial_backoff=retry_backoff,
                max_backoff=max(_DEFAULTS.retry.max_backoff, retry_backoff),
            ),
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            key_filters=key_filters,
            drain_timeout=drain_timeout,
            stuck_after=stuck_after,
            wedged_after=wedged_after,
            commit_interval=commit_interval,
            startup_timeout=startup_timeout,
            key_deserializer=deserializers[0],
            value_deserializer=deserializers[1],
            tracing=tracing,
            batch_size=batch_size,
            batch_linger=batch_linger,
            exactly_once=exactly_once or transactional_id is not None,
            transactional_id=transactional_id,
            transaction_timeout=transaction_timeout,
            max_held_output_bytes=max_held_output_bytes,
        )
    except KeySharedError as exc:
        raise click.UsageError(str(exc)) from None
    if tracing:
        warn_if_no_tracer_provider()
    if gc_tuning:
        tune_collector()
    if stop_requested:
        consumer.stop()  # the signal came while it was being built
    try:
        consumer.run()
    except KeySharedError as exc:
        raise click.ClickException(str(exc)) from None


def tune_collector(young_threshold: int = GC_YOUNG_THRESHOLD) -> None:
    """Make the cyclic GC cheap for a consumer process; called once the consumer is built.

    The command owns its interpreter, so it may do what the library must not (a library that
    changed global GC settings would change its host application's): modules, the handler's
    module and the consumer's clients are frozen out of every later scan (``gc.freeze``, after
    one collection so no start-up garbage is kept for good), and the youngest generation is
    collected less often (:data:`GC_YOUNG_THRESHOLD`). Cycles are still collected, later and
    in fewer, larger passes; the older generations keep their thresholds.
    """
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, oldest)
    log.info(
        "garbage collector: %d start-up objects frozen, youngest generation every %d "
        "allocations (--no-gc-tuning leaves Python's settings)",
        gc.get_freeze_count(),
        young_threshold,
    )


def warn_if_no_tracer_provider() -> None:
    """Spans sent to OpenTelemetry's default (proxy) provider go nowhere: say so at the start,
    not after an operator looked for traces that never came."""
    from opentelemetry import trace

    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        log.warning(
            "--tracing: no OpenTelemetry TracerProvider is configured, so spans go nowhere; "
            "set one in the handler module or run under opentelemetry-instrument"
        )


def _uses_zookeeper(mode: str, zookeeper: str | None, partition_leases: bool | None) -> bool:
    """Whether this run coordinates through ZooKeeper.

    ``key_shared`` always does. ``exclusive`` does whenever a ZooKeeper is known (flag or
    ``$KEYSHARED_ZOOKEEPER``): a single active member is what the mode promises. ``partition``
    does only when asked, with ``--partition-leases`` or a ``--zookeeper`` typed on the command
    line: ``keyshared dev env`` exports ``$KEYSHARED_ZOOKEEPER`` to every shell, and leases
    (a ZooKeeper session per member, a wait at each hand-over) should not switch on by accident.
    """
    if mode in ("key_shared", "exclusive"):
        return mode == "key_shared" or bool(zookeeper)
    if partition_leases is not None:
        return partition_leases
    source = click.get_current_context().get_parameter_source("zookeeper")
    return bool(zookeeper) and source is click.core.ParameterSource.COMMANDLINE
