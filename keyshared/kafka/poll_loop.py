"""The poll thread: the only code that calls the Kafka consumer.

It polls, admits records into the windows, pauses and resumes partitions as the windows fill
and drain, commits safe cursors, and serves rebalances. It never waits on a handler, so a slow
handler can never cost the group membership; the one place it waits is a revoke, where it must
(bounded by the drain timeout) so the next owner starts only after this one finished.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from keyshared.core.offsets import decode_finished
from keyshared.kafka.commits import Committer
from keyshared.kafka.dispatcher import Dispatcher
from keyshared.kafka.keystate import KeyStateStore
from keyshared.kafka.partition import PartitionState, Phase
from keyshared.metrics import ConsumerMetrics
from keyshared.settings import ConsumerOptions

__all__ = ["PollLoop"]

log = logging.getLogger(__name__)

TP = tuple[str, int]
_BATCH = 1000
_IDLE_POLL = 0.1
_SAMPLE_INTERVAL = 1.0
_HOT_KEY_WINDOW = 60.0  # seconds of traffic the busiest/slowest key sketches cover


class PollLoop:
    """Owns the consumer's thread-affine work; ``run`` returns after a drained, committed stop."""

    def __init__(
        self,
        consumer: Any,
        topics: list[str],
        options: ConsumerOptions,
        dispatcher: Dispatcher,
        metrics: ConsumerMetrics,
        keystate: KeyStateStore | None,
        stop_event: threading.Event,
        worker_depths: Callable[[], list[int]] = list,
        nudge_workers: Callable[[], None] = lambda: None,
    ) -> None:
        self._consumer = consumer
        self._topics = topics
        self._options = options
        self._dispatcher = dispatcher
        self._metrics = metrics
        self._keystate = keystate
        self._stop = stop_event
        self._worker_depths = worker_depths
        self._nudge_workers = nudge_workers
        self._committer = Committer(consumer, metrics, dispatcher.lock, self._state_of)
        self.states: dict[TP, PartitionState] = {}
        self._paused: set[TP] = set()

    def _state_of(self, tp: TP) -> PartitionState | None:
        return self.states.get(tp)

    @property
    def committer(self) -> Committer:
        return self._committer

    # -- main loop -----------------------------------------------------------------------------

    def run(self) -> None:
        self._consumer.subscribe(
            self._topics,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        interval = self._options.commit_interval
        next_commit = time.monotonic() + interval
        next_sample = time.monotonic() + _SAMPLE_INTERVAL
        while not self._stop.is_set():
            messages = self._consumer.consume(_BATCH, _IDLE_POLL)
            if messages:
                self._admit(messages)
            self._apply_backpressure()
            self._nudge_workers()
            now = time.monotonic()
            if now >= next_commit:
                self._observe_positions()
                self._committer.commit_async(self.states.values())
                next_commit = now + interval
            if now >= next_sample:
                self.sample_metrics()
                next_sample = now + _SAMPLE_INTERVAL
        self._shutdown()

    def _admit(self, messages: list[Any]) -> None:
        by_partition: dict[TP, list[Any]] = defaultdict(list)
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._on_error(err)
                continue
            by_partition[(msg.topic(), msg.partition())].append(msg)
        for tp, batch in by_partition.items():
            state = self.states.get(tp)
            if state is not None:
                self._dispatcher.admit(state, batch)

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.fatal():
            raise KafkaException(err)
        log.warning("consumer error: %s", err)

    def _apply_backpressure(self) -> None:
        pause: list[TopicPartition] = []
        resume: list[TopicPartition] = []
        with self._dispatcher.lock:
            for tp, state in self.states.items():
                window = state.window
                if window is None:
                    continue
                if tp not in self._paused and window.should_pause():
                    pause.append(TopicPartition(*tp))
                    self._paused.add(tp)
                elif tp in self._paused and window.should_resume():
                    resume.append(TopicPartition(*tp))
                    self._paused.discard(tp)
        if pause:
            self._consumer.pause(pause)
            log.debug("paused %s: window full", [str(tp) for tp in pause])
        if resume:
            self._consumer.resume(resume)
        if pause or resume:
            self._metrics.set_paused_partitions(len(self._paused))

    def _observe_positions(self) -> None:
        """Let cursors pass offsets never delivered (transaction markers at the end)."""
        if not self.states:
            return
        try:
            positions = self._consumer.position([TopicPartition(*tp) for tp in self.states])
        except KafkaException as exc:
            log.debug("position lookup failed: %s", exc)
            return
        with self._dispatcher.lock:
            for tp in positions:
                state = self.states.get((tp.topic, tp.partition))
                if state is None or tp.offset < 0:
                    continue
                if state.window is None:
                    if state.committed is None or tp.offset <= state.committed:
                        continue
                    state.window = self._dispatcher.new_window(state, state.committed)
                state.window.observe_position(tp.offset)

    def sample_metrics(self) -> None:
        """Refresh the gauges (about once a second, never per record)."""
        for worker, depth in enumerate(self._worker_depths()):
            self._metrics.worker_queue_depth(worker, depth)
        now = time.monotonic()
        for state in list(self.states.values()):
            try:
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(state.topic, state.partition), cached=True
                )
                if high >= 0:
                    state.high_watermark = high
            except KafkaException:
                pass
            with self._dispatcher.lock:
                window = state.window
                blocker = window.blocker(now) if window is not None else None
                state.metrics.update(
                    in_flight=window.in_flight if window else 0,
                    waiting=window.waiting if window else 0,
                    busy_keys=window.busy_keys if window else 0,
                    blocked_keys=len(state.blocked) + len(state.parked),
                    paused=state.tp in self._paused,
                    safe_cursor=window.safe_cursor if window else (state.committed or 0),
                    committed=state.committed,
                    high_watermark=state.high_watermark,
                    oldest_incomplete_age=blocker.age if blocker else 0.0,
                    hot_key_share=state.busiest.share_of_top(),
                )
            if now - state.sketches_since > _HOT_KEY_WINDOW:
                # The sketches describe recent traffic, not the partition's whole history.
                state.busiest.clear()
                state.slowest.clear()
                state.sketches_since = now

    # -- rebalance callbacks (called from within consume, on this thread) ----------------------

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalance("assigned")
        stopping = self._stop.is_set()
        if not partitions:
            return
        committed = consumer.committed(partitions, timeout=self._options.startup_timeout)
        parked: dict[TP, set[bytes | None]] = {}
        if self._keystate is not None:
            parked = self._keystate.load(
                [(tp.topic, tp.partition) for tp in partitions], self._options.startup_timeout
            )
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else None
            metadata = tp.metadata or ""
            done = decode_finished(offset, metadata) if offset is not None else frozenset()
            key = (tp.topic, tp.partition)
            self.states[key] = PartitionState(
                tp.topic,
                tp.partition,
                self._metrics.partition(tp.topic, tp.partition),
                committed=offset,
                committed_metadata=metadata,
                already_done=done,
                parked=set(parked.get(key, ())),
                phase=Phase.DRAINING if stopping else Phase.ACTIVE,  # assigned mid-shutdown
            )
        log.info("assigned %s", ", ".join(_describe(tp, done_count=None) for tp in committed))

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalance("revoked")
        revoked = [s for tp in partitions if (s := self.states.pop((tp.topic, tp.partition), None))]
        if not revoked:
            return
        self._drain_and_commit(revoked, reason="revoke")

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalance("lost")
        lost = [s for tp in partitions if (s := self.states.pop((tp.topic, tp.partition), None))]
        log.warning(
            "lost %s: in-flight results will be discarded, nothing committed",
            ", ".join(str(s) for s in lost),
        )
        self._dispatcher.remove(lost)
        self._forget(lost)

    def _drain_and_commit(self, states: list[PartitionState], reason: str) -> None:
        """Wait for what runs (bounded), commit synchronously, then let the partitions go."""
        self._dispatcher.stop_dispatching(states)
        started = time.monotonic()
        drained = self._dispatcher.wait_drained(states, self._options.drain_timeout)
        elapsed = time.monotonic() - started
        self._metrics.drain(elapsed, not drained)
        if not drained:
            log.warning(
                "%s: drain of %s timed out after %.1fs; records still running there may be "
                "processed again by the next owner",
                reason,
                ", ".join(map(str, states)),
                elapsed,
            )
        self._observe_positions_for(states)
        self._committer.commit_sync(states)
        self._dispatcher.remove(states)
        self._forget(states)
        log.info("%s: released %s after %.3fs", reason, ", ".join(map(str, states)), elapsed)

    def _observe_positions_for(self, states: list[PartitionState]) -> None:
        saved = self.states
        self.states = {s.tp: s for s in states}
        try:
            self._observe_positions()
        finally:
            self.states = saved

    def _forget(self, states: list[PartitionState]) -> None:
        for state in states:
            self._paused.discard(state.tp)
            self._metrics.forget_partition(state.topic, state.partition)
        self._metrics.set_paused_partitions(len(self._paused))

    def _shutdown(self) -> None:
        """Drain and commit while still serving the group, then let the partitions go.

        The loop keeps calling ``consume`` (with every partition paused) until the in-flight
        records finished and the final commit went through: a rebalance that is under way when
        the stop comes then completes, instead of making the last commit fail with a stale
        generation and the next owner redo finished work.
        """
        states = list(self.states.values())
        if not states:
            return
        self._dispatcher.stop_dispatching(states)
        started = time.monotonic()
        deadline = started + self._options.drain_timeout
        drained = False
        while True:
            self._pause_everything()
            live = list(self.states.values())  # a revoke meanwhile drains and commits its own
            drained = self._dispatcher.wait_drained(live, 0.05)
            if drained or time.monotonic() >= deadline:
                break
            self._serve_group()
        elapsed = time.monotonic() - started
        self._metrics.drain(elapsed, not drained)
        if not drained:
            log.warning(
                "shutdown: drain timed out after %.1fs; records still running may be processed "
                "again by the next owner",
                elapsed,
            )
        while True:
            live = list(self.states.values())
            self._dispatcher.stop_dispatching(live)  # partitions assigned during the stop
            self._observe_positions_for(live)
            if self._committer.commit_sync(live) or time.monotonic() >= deadline:
                break
            log.info("shutdown: retrying the final commit once the group settles")
            self._serve_group()
        self.states = {}
        self._dispatcher.remove(live)
        self._forget(live)
        log.info("shutdown: released %s after %.3fs", ", ".join(map(str, live)), elapsed)

    def _pause_everything(self) -> None:
        try:
            assignment = self._consumer.assignment()
            if assignment:
                self._consumer.pause(assignment)
        except KafkaException as exc:
            log.debug("pause during shutdown failed: %s", exc)

    def _serve_group(self) -> None:
        """Let librdkafka serve rebalances and callbacks; records it returns are not admitted
        (every state is draining) and will be redelivered from the committed cursor."""
        for msg in self._consumer.consume(100, 0.1):
            err = msg.error()
            if err is not None and err.fatal():
                raise KafkaException(err)


def _describe(tp: TopicPartition, done_count: int | None) -> str:
    return f"{tp.topic}[{tp.partition}]@{tp.offset if tp.offset >= 0 else 'start'}"
