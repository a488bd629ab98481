"""Every option keyshared owns, with its default and the reason for it, validated in one place.

The confluent-kafka config dict is the user's and passes through untouched except for the few
properties keyshared must own to keep its guarantees; a conflicting user value is an error at
construction that names the property, never a silent override.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from keyshared.core.modes import MODES, Mode
from keyshared.core.poison import PoisonPolicy, RetryPolicy, validate_policy_for_mode
from keyshared.core.redaction import Redactor
from keyshared.errors import ConfigurationError

__all__ = ["CLIENT_LOGGER", "MODES", "ConsumerOptions", "build_kafka_config"]

# Where librdkafka's own log lines go (connection failures, config warnings) unless the config
# names a ``logger``: one name, so an application can raise or lower their level at once.
CLIENT_LOGGER = logging.getLogger("keyshared.librdkafka")

# bytes -> object, or a confluent_kafka.serialization.Deserializer (called with its context)
Deserializer = Callable[..., Any]


@dataclass(frozen=True)
class ConsumerOptions:
    """What the wrapper decides; Kafka's own settings stay in the config dict.

    :param workers: worker threads (or concurrent coroutines for ``async def`` handlers).
        Keys are spread over them by a consistent-hash ring. I/O-bound handlers want many.
    :param max_window: per partition, in-flight + waiting records before fetching pauses.
        Bounds memory (about 1 KiB per record plus its payload) and redelivery after a crash.
    :param per_worker_capacity: per partition, records one worker may hold in flight before
        more wait, so one slow worker cannot take the whole window.
    :param commit_interval: seconds between asynchronous commits of the safe cursor.
    :param drain_timeout: seconds a revoked partition waits for its in-flight records before
        giving up (with a warning and a metric) so the rebalance can finish.
    :param key_filters: glob patterns; records whose key matches none are skipped as done.
    :param null_keys_ordered: treat null keys as one ordered key instead of unordered.
    :param retry: attempts and backoff before the poison policy applies.
    :param poison: what happens after the last attempt. Default ``dead_letter``, or
        ``block_and_dead_letter`` in ``exclusive`` mode (where skipping is not allowed).
    :param poison_by_topic: per-topic overrides of ``poison``.
    :param dlq_topic: DLQ topic; ``{topic}`` is replaced by the source topic.
    :param key_deserializer: applied on the worker; a raise takes the poison path, no retry.
        A ``bytes -> object`` callable, or a confluent-kafka ``Deserializer`` (such as
        ``AvroDeserializer(schema_registry_client)``), called with its ``SerializationContext``.
    :param value_deserializer: as ``key_deserializer``, for values.
    :param metrics_port: serve Prometheus metrics on this port (0 picks one); None: off.
    :param metrics_host: address of the metrics endpoint; loopback unless set for containers.
    :param startup_timeout: seconds to wait for the broker to answer before failing clearly.
    :param mode: ``partition`` (default), ``key_shared`` or ``exclusive``.
    :param ack_timeout: pull style only: seconds a record may stay un-acked before it counts
        as failed and is redelivered (its key stays blocked meanwhile).
    :param stuck_after: seconds after which the record holding a partition's committed offset
        back (the oldest unfinished one) is reported as stuck: one warning naming its topic,
        partition, offset and key. Checked once a second, never per record. A minute is longer
        than a healthy handler takes and short enough for an operator to act before lag grows.
        Such a partition also makes ``/readyz`` fail.
    :param wedged_after: seconds without a poll-loop iteration after which ``/healthz`` fails
        (the process is wedged). None (default) derives it as ``drain_timeout + 3 *
        startup_timeout`` (120 s by default): the longest one healthy iteration may block, a
        revoke's drain plus its commit, or an assignment reading committed offsets and parked
        keys. Handlers never count: they run on workers, not on the poll thread.
    :param redact: ``str -> str``, applied to every text keyshared derives from a record or a
        handler's error before it leaves the process: keys in log lines and ``/hotkeys``, error
        messages and tracebacks in logs, DLQ error headers and blocked-key reasons. A raise
        shows ``<redaction failed>``, never the raw text. The dead letter's own key, value and
        headers are never changed (replay needs them byte for byte).
    :param tracing: OpenTelemetry spans per handler call (the ``otel`` extra): ``True`` uses
        the global TracerProvider, a TracerProvider uses that one, ``False`` (default) costs
        nothing. Each span continues the trace in the record's ``traceparent`` header.
    :param batch_size: hand the handler a ``list[Record]`` of up to this many records instead
        of one record (None: one record per call). A batch holds only records that may run
        now, so never two of one ordered key; per-key order is the same as for single records.
        A handler raising :class:`keyshared.BatchError` fails only the records it names.
    :param batch_linger: seconds a worker with fewer than ``batch_size`` records waits for
        more before calling the handler. 0 (the default) adds no latency: under load records
        queue while the previous batch runs, so batches fill by themselves.
    :param exactly_once: commit what handlers write through ``record.output`` (and dead
        letters) in one Kafka transaction per commit interval with the offsets that mark their
        records finished (read_committed readers see each once). Not in ``key_shared`` mode:
        its cursors live in ZooKeeper, which cannot join a Kafka transaction.
    :param transactional_id: the member's ``transactional.id`` (implies ``exactly_once``).
        Default: ``keyshared-{group}-{member}-{random}``, new for every run, so replicas that
        share a ``client.id`` never share an id (two live holders of one id fence each other).
        Give one stable id per replica (a pod name), never one for all: a restart then aborts
        its predecessor's open transaction at once instead of after ``transaction_timeout``.
    :param transaction_timeout: seconds (the producer's ``transaction.timeout.ms``) after
        which the broker aborts an open transaction of a member that died: until then it
        blocks ``read_committed`` readers of its output partitions and the next owner's
        committed-offset read. It also bounds how long one commit may take to produce its
        outputs. Must not exceed the broker's ``transaction.max.timeout.ms`` (15 min).
    :param max_held_output_bytes: with ``exactly_once``: bytes (keys, values, headers) of
        finished records' outputs the member holds while they wait for a transaction. At the
        bound, fetching pauses for every partition holding outputs until they are under half
        of it (a held commit: a missing DLQ topic, no producer, overflowed metadata); a
        commit of more than this is split into several transactions, whole partitions each.
    """

    workers: int = 16
    max_window: int = 10_000
    per_worker_capacity: int = 1_000
    commit_interval: float = 1.0
    drain_timeout: float = 30.0
    key_filters: Sequence[str] = ()
    null_keys_ordered: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    poison: PoisonPolicy | str | None = None
    poison_by_topic: Mapping[str, PoisonPolicy | str] = field(default_factory=dict)
    dlq_topic: str = "{topic}.dlq"
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    startup_timeout: float = 30.0
    mode: Mode | str = Mode.PARTITION
    ack_timeout: float = 300.0
    stuck_after: float = 60.0
    wedged_after: float | None = None
    redact: Redactor | None = None
    tracing: Any = False  # bool or an opentelemetry TracerProvider (an optional dependency)
    batch_size: int | None = None
    batch_linger: float = 0.0
    exactly_once: bool = False
    transactional_id: str | None = None
    transaction_timeout: float = 10.0
    max_held_output_bytes: int = 67_108_864

    def __post_init__(self) -> None:
        positive_ints = ("workers", "max_window", "per_worker_capacity", "max_held_output_bytes")
        for name in positive_ints:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigurationError(name, f"must be a positive integer, got {value!r}")
        for name in (
            "commit_interval",
            "drain_timeout",
            "startup_timeout",
            "ack_timeout",
            "stuck_after",
            "transaction_timeout",
        ):
            value = getattr(self, name)
            # NaN compares false with everything: it would pass "> 0" and then, as a deadline,
            # never come (commit_interval=nan never commits). Infinity is no bound either.
            if (
                not isinstance(value, (int, float))
                or isinstance(value, bool)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ConfigurationError(
                    name, f"must be a positive, finite number of seconds, got {value!r}"
                )
        self._check_batching()
        if self.wedged_after is not None and not (
            isinstance(self.wedged_after, (int, float))
            and not isinstance(self.wedged_after, bool)
            and math.isfinite(self.wedged_after)
            and self.wedged_after > self.drain_timeout
        ):
            raise ConfigurationError(
                "wedged_after",
                f"must be a finite number of seconds above drain_timeout "
                f"({self.drain_timeout:g}s: a revoke may hold the poll loop that long), "
                f"got {self.wedged_after!r}",
            )
        if self.mode not in MODES:
            raise ConfigurationError(
                "mode", f"must be one of {', '.join(MODES)}, got {self.mode!r}"
            )
        object.__setattr__(self, "mode", Mode(self.mode))  # frozen: set once, validated
        if self.transactional_id is not None:
            if not isinstance(self.transactional_id, str) or not self.transactional_id:
                raise ConfigurationError("transactional_id", "must be a non-empty string")
            object.__setattr__(self, "exactly_once", True)
        if self.exactly_once and self.mode is Mode.KEY_SHARED:
            raise ConfigurationError(
                "exactly_once",
                "is not available in key_shared mode: its cursors live in ZooKeeper, which "
                "cannot take part in a Kafka transaction (outputs and cursor could not be "
                "committed atomically); use partition or exclusive mode",
            )
        default = (
            PoisonPolicy.BLOCK_AND_DEAD_LETTER
            if self.mode is Mode.EXCLUSIVE
            else (PoisonPolicy.DEAD_LETTER)
        )
        object.__setattr__(self, "poison", self._policy("poison", self.poison or default))
        object.__setattr__(
            self,
            "poison_by_topic",
            {
                topic: self._policy(f"poison_by_topic[{topic!r}]", policy)
                for topic, policy in dict(self.poison_by_topic).items()
            },
        )
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigurationError("metrics_port", f"must be 0..65535, got {self.metrics_port}")
        if self.redact is not None and not callable(self.redact):
            raise ConfigurationError(
                "redact", f"must be a callable taking and returning a str, got {self.redact!r}"
            )
        for name in ("key_deserializer", "value_deserializer"):
            deserializer = getattr(self, name)
            if deserializer is not None and not callable(deserializer):
                raise ConfigurationError(
                    name, f"must be callable (or a confluent-kafka Deserializer): {deserializer!r}"
                )
            call = getattr(deserializer, "__call__", None)  # noqa: B004
            if inspect.iscoroutinefunction(deserializer) or inspect.iscoroutinefunction(call):
                raise ConfigurationError(
                    name, "asynchronous deserializers are not supported: use the synchronous one "
                    "(AvroDeserializer, not AsyncAvroDeserializer)",
                )  # fmt: skip
        if not self.dlq_topic:
            raise ConfigurationError("dlq_topic", "must not be empty")
        for pattern in self.key_filters:
            if not isinstance(pattern, str) or not pattern:
                raise ConfigurationError(
                    "key_filters", f"patterns must be non-empty strings: {pattern!r}"
                )

    def _check_batching(self) -> None:
        size, linger = self.batch_size, self.batch_linger
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
            raise ConfigurationError(
                "batch_size", f"must be a positive integer or None, got {size!r}"
            )
        if (
            not isinstance(linger, (int, float))
            or isinstance(linger, bool)
            or not math.isfinite(linger)
            or linger < 0
        ):
            raise ConfigurationError(
                "batch_linger", f"must be a finite number of seconds >= 0, got {linger!r}"
            )
        if linger and size is None:
            raise ConfigurationError(
                "batch_linger", "only applies to batch handlers: set batch_size as well"
            )

    def _policy(self, option: str, value: PoisonPolicy | str) -> PoisonPolicy:
        try:
            policy = PoisonPolicy(value)
        except ValueError:
            allowed = ", ".join(p.value for p in PoisonPolicy)
            raise ConfigurationError(option, f"must be one of {allowed}, got {value!r}") from None
        try:
            validate_policy_for_mode(policy, self.mode)
        except ValueError as exc:
            raise ConfigurationError(option, str(exc)) from None
        return policy

    @property
    def liveness_bound(self) -> float:
        """Seconds the poll loop may go without an iteration before it counts as wedged."""
        if self.wedged_after is not None:
            return float(self.wedged_after)
        return self.drain_timeout + 3 * self.startup_timeout

    def poison_for(self, topic: str) -> PoisonPolicy:
        """The terminal policy for records of ``topic``."""
        policy = self.poison_by_topic.get(topic, self.poison)
        assert isinstance(policy, PoisonPolicy)
        return policy

    def dlq_topic_for(self, topic: str) -> str:
        return self.dlq_topic.replace("{topic}", topic)


# Properties keyshared must own: commits are its job (only safe offsets), and offsets are
# stored by it, never by librdkafka on delivery.
_OWNED: dict[str, str] = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
}


def build_kafka_config(user: Mapping[str, Any]) -> dict[str, Any]:
    """The consumer config: the user's dict plus what keyshared owns, or a clear error."""
    if not isinstance(user, Mapping):
        raise ConfigurationError("config", "must be a confluent-kafka config dict")
    config = dict(user)
    if not config.get("group.id"):
        raise ConfigurationError("group.id", "is required: keyshared consumes as a group member")
    if not config.get("bootstrap.servers"):
        raise ConfigurationError("bootstrap.servers", "is required")
    for prop, owned in _OWNED.items():
        given = config.get(prop)
        if given is not None and str(given).lower() != owned:
            raise ConfigurationError(
                prop, f"keyshared commits only safe offsets itself, so it must be {owned}"
            )
        config[prop] = owned
    if str(config.get("group.protocol", "classic")).lower() == "consumer":
        # KIP-848: the broker assigns; client-side assignors and timeouts are rejected.
        if "partition.assignment.strategy" in config:
            raise ConfigurationError(
                "partition.assignment.strategy",
                "is not allowed with group.protocol=consumer (the broker assigns)",
            )
    else:
        config.setdefault("partition.assignment.strategy", "cooperative-sticky")
    config.setdefault("auto.offset.reset", "earliest")
    # Every client built from this config (the consumer, and through client_properties the
    # DLQ, key-state and transactional producers) logs through Python logging, never as raw
    # "%4|...|" lines on stderr that a log pipeline cannot parse or filter.
    config.setdefault("logger", CLIENT_LOGGER)
    return config
