"""``KeySharedConsumer``: the public entry point; it runs the parts, it does not do their work.

Each responsibility lives elsewhere: the poll loop (``poll_loop``), dispatch and windows
(``dispatcher``), what happens to a record (``execution``), commits (``commits``), dead letters
(``dlq``), parked keys (``keystate``), workers (``workers``). Building them in the order they
need each other is ``assembly``'s; this class checks its arguments, runs the loop, tears
everything down in the right order, and serves the pull style and operator releases.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

from confluent_kafka import KafkaException, TopicPartition

from keyshared.consumer.arguments import (
    check_arguments,
    check_drain_timeout,
    resolve_options,
    topic_list,
)
from keyshared.consumer.assembly import RunParts, assemble
from keyshared.core.redaction import shown_key
from keyshared.errors import ConfigurationError, KeySharedError
from keyshared.kafka.startup import ClientErrors, build_consumer, check_reachable
from keyshared.kafka.transactional_config import check_producer_config
from keyshared.modes.recipes import Recipes
from keyshared.record import Record
from keyshared.runtime.batches import BatchHandler
from keyshared.runtime.tracing import handler_tracer
from keyshared.settings import ConsumerOptions, build_kafka_config

__all__ = ["KeySharedConsumer"]

log = logging.getLogger(__name__)
_member_seq = itertools.count(1)


class KeySharedConsumer:
    """A consumer-group member that processes records in parallel per key, in order per key.

    Example::

        def handle(record: keyshared.Record) -> None:
            print(record.key, record.value)

        consumer = KeySharedConsumer(
            {"bootstrap.servers": "127.0.0.1:9092", "group.id": "orders"},
            ["orders"], handle, workers=32, poison="dead_letter",
        )
        consumer.run()          # blocks until consumer.stop() (thread-safe) is called

    :param config: a confluent-kafka consumer config, passed through; keyshared owns
        ``enable.auto.commit`` and ``enable.auto.offset.store`` (a conflicting value is an error).
    :param topics: topics to subscribe to.
    :param handler: called with each :class:`keyshared.Record`; a plain function runs on a
        worker thread, an ``async def`` function on an event loop. Raising means failure.
        With ``batch_size=N`` it is called with a ``list[Record]`` of up to N records instead
        (never two of one key); raising :class:`keyshared.BatchError` fails only the records
        it names, any other exception fails the whole batch.
        ``None`` selects the pull style: iterate :meth:`records`, then :meth:`ack`/:meth:`nack`.
    :param coordinator: a ``coordinator.ZooKeeperCoordinator``: required by ``key_shared``
        mode (members split the slot space), optional in ``partition`` mode (partition leases:
        no overlap after a drain timeout) and ``exclusive`` mode (one active member, standbys).
        The consumer owns its session while it runs and closes it at the end.
    :param options: a :class:`~keyshared.settings.ConsumerOptions`, or give its fields as
        keyword arguments (``workers=64, poison="park"``...).
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        topics: Iterable[str],
        handler: Callable[[Record], Any] | BatchHandler | None,
        *,
        coordinator: Recipes | None = None,
        options: ConsumerOptions | None = None,
        **option_values: Any,
    ) -> None:
        options = resolve_options(options, option_values)
        self.options = options
        check_arguments(options, coordinator, handler)
        self._coordinator = coordinator
        self._config = build_kafka_config(config)
        check_drain_timeout(options, self._config)
        check_producer_config(self._config, options)
        self.topics = topic_list(topics)
        self._is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004
        )
        self.group = str(self._config["group.id"])
        self._tracer = handler_tracer(options.tracing, self.group, options.redact)
        if self._tracer is not None and handler is not None:
            if options.batch_size is not None:
                handler = self._tracer.wrap_batch(cast(BatchHandler, handler), self._is_async)
            else:
                handler = self._tracer.wrap(cast(Callable[[Record], Any], handler), self._is_async)
        self._handler = handler
        self.member = str(
            self._config.get("client.id")
            or f"{socket.gethostname()}-{os.getpid()}-{next(_member_seq)}"
        )
        self._config.setdefault("client.id", self.member)
        self._stop = threading.Event()
        self._ran = False
        user_error_cb = self._config.get("error_cb")
        self._client_errors = ClientErrors(user_error_cb if callable(user_error_cb) else None)
        # Built now so that a bad librdkafka property fails here, naming it, not in run().
        self._consumer = build_consumer(self._config, self._on_commit, self._client_errors)
        self._consumer_closed = False
        self._started = threading.Event()
        self._parts = RunParts()  # filled in as run() builds them (assembly.py)
        self._finished = threading.Event()
        self._bg_lock = threading.Lock()
        self._bg_thread: threading.Thread | None = None
        self._bg_error: BaseException | None = None
        self._own_releases: set[tuple[str, int, bytes | None]] = set()
        self._own_releases_lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------

    def run(self) -> None:
        """Consume until :meth:`stop`; then drain in-flight records, commit, and close."""
        with self._bg_lock:
            if self._ran:
                raise KeySharedError("run() can be called once per KeySharedConsumer")
            self._ran = True
        try:
            reachable = check_reachable(
                self._consumer,
                self.topics,
                self._config,
                self.options.startup_timeout,
                self._stop,
                self._client_errors,
            )
        except BaseException:
            self._consumer.close()
            raise
        if not reachable:  # stopped before the broker answered
            self._consumer.close()
            self._finished.set()
            return
        with contextlib.ExitStack() as stack:
            # One tear-down path, in reverse order of what started; every exit takes it
            # (a coordinator that cannot plug in, an exception out of the poll loop).
            stack.callback(self._finished.set)
            stack.callback(self._close_consumer)  # if something below fails before polling
            self._run_parts(stack)
        log.info("consumer %s of group %s stopped", self.member, self.group)

    def _run_parts(self, stack: contextlib.ExitStack) -> None:
        loop = assemble(
            stack,
            self._parts,
            consumer=self._consumer,
            config=self._config,
            options=self.options,
            group=self.group,
            member=self.member,
            topics=self.topics,
            handler=self._handler,
            is_async=self._is_async,
            tracer=self._tracer,
            coordinator=self._coordinator,
            stop=self._stop,
            request_stop=self.stop,
            on_remote_release=self._on_remote_release,
        )
        stack.callback(self._close_consumer)  # first of all once the loop ends: leave the group
        self._started.set()
        loop.run()

    def _close_consumer(self) -> None:
        """Close the Kafka consumer (once; a failure is logged, the tear-down goes on)."""
        if self._consumer_closed:
            return
        self._consumer_closed = True
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("closing the consumer failed: %s", exc)

    # -- pull style ------------------------------------------------------------------------------

    def records(self, timeout: float | None = None) -> Iterator[Record]:
        """Pull records (consumer built with ``handler=None``); ack or nack each one.

        Starts :meth:`run` on a background thread on first use. Ends when the consumer stops or,
        with ``timeout``, when no record came for that long. Records of one key come one at a
        time: the next is offered only after the previous was acked (or finally failed).
        """
        if self._handler is not None:
            raise ConfigurationError("handler", "records() is for pull style: pass handler=None")
        self._start_background()
        self._started.wait()
        while not self._finished.is_set():
            pull = self._parts.pull
            if pull is None:
                return
            record = pull.get(timeout if timeout is not None else 0.2)
            if record is not None:
                yield record
            elif timeout is not None:
                return

    def ack(self, record: Record) -> bool:
        """The pulled record is processed. False if it was already settled (e.g. timed out)."""
        pull = self._parts.pull
        return pull is not None and pull.ack(record)

    def nack(self, record: Record, error: BaseException | None = None) -> bool:
        """The pulled record failed: retried with backoff, then the poison policy applies."""
        pull = self._parts.pull
        if pull is None:
            return False
        return pull.nack(record, error or RuntimeError("nacked by the application"))

    def _start_background(self) -> None:
        with self._bg_lock:
            if self._bg_thread is None:
                self._bg_thread = threading.Thread(
                    target=self._run_background, name="keyshared-poll", daemon=True
                )
                self._bg_thread.start()

    def _run_background(self) -> None:
        try:
            self.run()
        except BaseException as exc:
            self._bg_error = exc
            self._started.set()
            self._finished.set()

    def close(self, timeout: float | None = None) -> None:
        """Stop and wait for a background :meth:`records` run to finish; re-raise its error."""
        self.stop()
        if self._bg_thread is not None:
            self._bg_thread.join(timeout)
        if self._bg_error is not None:
            raise self._bg_error

    def stop(self) -> None:
        """Ask :meth:`run` to drain, commit and return. Safe from any thread or signal handler."""
        self._stop.set()

    def wait_started(self, timeout: float | None = None) -> bool:
        """Wait until :meth:`run` has built everything and started polling."""
        return self._started.wait(timeout)

    def __enter__(self) -> KeySharedConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bg_thread is not None:
            self.close()
        else:
            self.stop()

    @property
    def metrics_url(self) -> str | None:
        server = self._parts.metrics_server
        return server.url if server is not None else None

    # -- operator actions ----------------------------------------------------------------------

    def release(
        self, topic: str, partition: int, key: bytes | None, *, retry: bool = False
    ) -> str | None:
        """Release a blocked or parked key; ``retry`` re-runs a blocked record, else it is skipped.

        Returns what was released (``"blocked"``, ``"parked"``) or None if this member does not
        hold the key. The release is also written to the key-state topic so it survives restarts.
        """
        keystate = self._parts.keystate
        if keystate is not None:
            # Durable first; the store echoes our own release back through on_release, which
            # must not skip a record the caller asked to retry.
            with self._own_releases_lock:
                self._own_releases.add((topic, partition, key))
            keystate.release(topic, partition, key)
        return self._release_local(topic, partition, key, retry=retry)

    def _release_local(
        self, topic: str, partition: int, key: bytes | None, *, retry: bool
    ) -> str | None:
        loop, dispatcher = self._parts.loop, self._parts.dispatcher
        if loop is None or dispatcher is None:
            return None
        state = loop.states.get((topic, partition))
        if state is None:
            return None
        released = dispatcher.release(state, key, retry=retry)
        if released:
            log.info(
                "released %s key %s of %s", released, shown_key(key, self.options.redact), state
            )
        return released

    def _on_remote_release(self, topic: str, partition: int, key: bytes | None) -> None:
        with self._own_releases_lock:
            if (topic, partition, key) in self._own_releases:
                self._own_releases.discard((topic, partition, key))
                return
        self._release_local(topic, partition, key, retry=False)

    def _on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        loop = self._parts.loop
        if loop is not None:
            loop.committer.on_commit(err, partitions)
