"""One run of a consumer, assembled: every part built in the order it needs the others.

Kept apart from :mod:`keyshared.consumer.key_shared_consumer`, which is the public face (the
constructor's checks, run/stop, the pull style, operator releases) and the tear-down's outer frame.
Building the parts is one long, order-sensitive sequence that changes each time a part is added: the
scheduler before the DLQ writer and the key-state store that retry through it; the runner before the
dispatcher, which needs its ``submit``; the dispatcher before the executor and the coordinator's
plug; the plug's seams before the poll loop. Each part's tear-down is registered on the run's
``ExitStack`` as it is built, so every exit closes what started, in reverse.

What the consumer's own methods reach from other threads (a release, the pull style, commit
callbacks, the metrics URL) is set in :class:`RunParts` the moment each part is built, so they see
it as soon as it exists (the key-state store before it starts loading, for instance).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from keyshared.consumer.health_view import HealthView
from keyshared.consumer.hotkeys_view import hot_keys_report
from keyshared.core.modes import Mode
from keyshared.core.poison import PoisonPolicy
from keyshared.kafka.deserializers import decoder
from keyshared.kafka.dlq import DeadLetterWriter
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.kafka.keystate import KeyStateStore
from keyshared.kafka.poll_loop import PollLoop
from keyshared.kafka.seams import Plug, PlugContext, PollInbox
from keyshared.kafka.topic_ids import TopicIds
from keyshared.kafka.transactions import transactional_store
from keyshared.metrics import ConsumerMetrics, MetricsServer, start_metrics_server
from keyshared.modes.plug import plug as plug_mode
from keyshared.modes.recipes import Recipes
from keyshared.record import Record
from keyshared.runtime.batches import BatchHandler
from keyshared.runtime.dispatcher import Dispatcher
from keyshared.runtime.execution import RecordExecutor
from keyshared.runtime.pull import PullQueue
from keyshared.runtime.runners import Runner, make_runner
from keyshared.runtime.scheduler import Scheduler
from keyshared.runtime.tracing import HandlerTracer
from keyshared.settings import ConsumerOptions

__all__ = ["RunParts", "assemble"]

log = logging.getLogger("keyshared.consumer.key_shared_consumer")  # the consumer's own log
_NEEDS_KEYSTATE = (PoisonPolicy.BLOCK, PoisonPolicy.BLOCK_AND_DEAD_LETTER, PoisonPolicy.PARK)


@dataclass
class RunParts:
    """The parts of a run that the consumer reaches from other threads; None until built."""

    dispatcher: Dispatcher | None = None
    keystate: KeyStateStore | None = None
    pull: PullQueue | None = None
    loop: PollLoop | None = None
    metrics_server: MetricsServer | None = None


def assemble(
    stack: contextlib.ExitStack,
    parts: RunParts,
    *,
    consumer: KafkaConsumer,
    config: dict[str, Any],
    options: ConsumerOptions,
    group: str,
    member: str,
    topics: list[str],
    handler: Callable[[Record], Any] | BatchHandler | None,
    is_async: bool,
    tracer: HandlerTracer | None,
    coordinator: Recipes | None,
    stop: threading.Event,
    request_stop: Callable[[], None],
    on_remote_release: Callable[[str, int, bytes | None], None],
) -> PollLoop:
    """Build one run's parts, filling ``parts`` and ``stack``; return the poll loop to run.

    :param consumer: the confluent-kafka consumer (built by the consumer's constructor).
    :param config: its librdkafka config.
    :param stop: set to end the run; ``request_stop`` sets it (for a coordinator).
    :param on_remote_release: a release read from the key-state topic.
    """
    metrics = ConsumerMetrics(group, member)
    stack.callback(metrics.close)
    metrics.set_workers(options.workers)
    for topic in (t for t in topics if not t.startswith("^")):
        # Known topics' series start at zero; a pattern subscription's appear on use.
        metrics.expect_topic(topic)
        if options.poison_for(topic).dead_letters:
            metrics.expect_dlq(options.dlq_topic_for(topic))
    scheduler = Scheduler()
    stack.callback(scheduler.close)
    dlq = DeadLetterWriter(
        config,
        group,
        options.dlq_topic_for,
        metrics,
        scheduler.call_later,
        redact=options.redact,
    )
    stack.callback(dlq.close, 5.0)
    keystate: KeyStateStore | None = None
    policies = {options.poison, *options.poison_by_topic.values()}
    if policies & set(_NEEDS_KEYSTATE):
        parts.keystate = keystate = KeyStateStore(
            config,
            group,
            on_remote_release,
            scheduler.call_later,
            redact=options.redact,
        )
        stack.callback(keystate.close)
        keystate.start()
    runner = make_runner(options, handler, is_async, scheduler.call_later)
    if isinstance(runner, PullQueue):
        parts.pull = runner
    stack.callback(runner.close)  # before the DLQ and key state: its last records use them
    parts.dispatcher = dispatcher = Dispatcher(
        options, runner.count, runner.submit, on_draining=runner.on_draining
    )
    txn = transactional_store(
        consumer, config, options, metrics, dispatcher, request_stop,
        # ZooKeeper's exclusive mode reads with assign(): the role's one transactional.id,
        # not the group generation, fences a stalled ex-active member (modes/exclusive.py).
        active_role=coordinator is not None and options.mode is Mode.EXCLUSIVE,
    )  # fmt: skip
    if txn is not None:
        stack.callback(txn.close)
    executor = RecordExecutor(
        options,
        None if options.batch_size else cast(Callable[[Record], Any], handler),
        dispatcher,
        scheduler.call_later,
        dlq,
        keystate,
        tracer,
        decode_key=decoder(options.key_deserializer, "key"),
        decode_value=decoder(options.value_deserializer, "value"),
        output_rules=txn.output_rules if txn is not None else None,
    )
    runner.bind(executor)
    inbox = PollInbox()
    plug = Plug()
    if coordinator is not None:
        context = PlugContext(
            group, member, topics, options, dispatcher, inbox, metrics,
            request_stop, dict(config), txn,
        )  # fmt: skip
        plug = plug_mode(coordinator, context)
    if plug.ownership is not None:
        dispatcher.use_ownership(plug.ownership)
    if txn is not None and plug.cursor_store is None:
        plug.cursor_store = txn  # with a coordinator, its fenced store commits through txn
    parts.loop = loop = PollLoop(
        consumer,
        topics,
        options,
        dispatcher,
        metrics,
        keystate,
        stop,
        worker_depths=lambda: [runner.depth(w) for w in range(runner.count)],
        nudge_workers=lambda: _nudge(runner, executor),
        membership=plug.membership,
        cursor_store=plug.cursor_store,
        inbox=inbox,
        topic_ids=_topic_ids(config, options, topics),
    )
    if txn is not None:
        txn.bind(loop)
    if options.metrics_port is not None:
        parts.metrics_server = server = start_metrics_server(
            options.metrics_port,
            options.metrics_host,
            hotkeys=lambda: hot_keys_report(loop, redact=options.redact),
            health=HealthView(loop, options, stop, dispatcher.holds),
        )
        stack.callback(server.close)
        log.info("metrics at %s", server.url)

    return loop


def _topic_ids(
    config: dict[str, Any], options: ConsumerOptions, topics: list[str]
) -> TopicIds | None:
    """The watch of the topics' ids for the modes whose cursors are Kafka's committed offsets:
    a topic recreated under them is read again from its start (keyshared/kafka/topic_ids.py).
    ``key_shared``'s own watch does that (modes/topic_watch.py); a pattern's topics are not
    watched (their names are not known here)."""
    named = [t for t in topics if not t.startswith("^")]
    if options.mode is Mode.KEY_SHARED or not named:
        return None
    return TopicIds(config, named)


def _nudge(runner: Runner, executor: RecordExecutor) -> None:
    """Periodic care from the poll loop: settle successes stuck behind a busy thread, and let
    idle threads take records queued behind a slow handler."""
    executor.settlements.flush_stale()
    runner.nudge()
