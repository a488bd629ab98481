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

from confluent_kafka import KafkaError, KafkaException

from keyshared.core.health import StuckPartition
from keyshared.core.offsets import decode_finished, incarnation_of
from keyshared.core.runs import EMPTY_RUNS
from keyshared.core.types import TP
from keyshared.kafka.backpressure import Backpressure
from keyshared.kafka.commits import Committer
from keyshared.kafka.group_membership import KafkaGroupMembership
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.kafka.keystate import KeyStateStore
from keyshared.kafka.positions import note_stale_positions, observe_positions
from keyshared.kafka.rewinds import Rewinds
from keyshared.kafka.sampling import LoopSampler
from keyshared.kafka.seams import CursorStore, GroupMembership, PollInbox
from keyshared.kafka.topic_ids import CHECK_EVERY_S, TopicIds
from keyshared.metrics import ConsumerMetrics
from keyshared.runtime.dispatcher import Dispatcher
from keyshared.runtime.partition import PartitionPhase, PartitionState
from keyshared.settings import ConsumerOptions

__all__ = ["PollLoop"]

log = logging.getLogger(__name__)

_BATCH = 1000
_IDLE_POLL = 0.1
_PAUSED_POLL = 0.005  # while a partition is paused: its resume is checked between polls
_SAMPLE_INTERVAL = 1.0
# A consumer error that says a topic went away (or came back under another id).
_TOPIC_GONE = (
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.UNKNOWN_TOPIC_ID,
    KafkaError.INCONSISTENT_TOPIC_ID,
)


class PollLoop:
    """Owns the consumer's thread-affine work; ``run`` returns after a drained, committed stop."""

    def __init__(
        self,
        consumer: KafkaConsumer,
        topics: list[str],
        options: ConsumerOptions,
        dispatcher: Dispatcher,
        metrics: ConsumerMetrics,
        keystate: KeyStateStore | None,
        stop_event: threading.Event,
        worker_depths: Callable[[], list[int]] = list,
        nudge_workers: Callable[[], None] = lambda: None,
        membership: GroupMembership | None = None,
        cursor_store: CursorStore | None = None,
        inbox: PollInbox | None = None,
        topic_ids: TopicIds | None = None,
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
        self._committer = Committer(consumer, metrics, dispatcher, self._state_of)
        self._membership = membership if membership is not None else KafkaGroupMembership()
        self._cursors: CursorStore = cursor_store if cursor_store is not None else self._committer
        self.inbox = inbox if inbox is not None else PollInbox()  # empty is falsy
        self.states: dict[TP, PartitionState] = {}
        self._backpressure = Backpressure(consumer, metrics)
        self._rewinds = Rewinds(consumer, dispatcher)
        self._topic_ids = topic_ids  # None: the membership watches its topics itself
        self._looks_seen = 0  # the looks of topic_ids whose answers the windows were checked on
        self._sampler = LoopSampler(consumer, dispatcher, metrics, options, worker_depths)
        # For the health probes (read from the endpoint's thread; each is replaced whole):
        # when the loop last went round, and each partition's oldest unfinished record as of
        # the last sample, with the sample's time.
        self.last_iteration = time.monotonic()
        self.oldest_unfinished: tuple[tuple[StuckPartition, ...], float] = ((), 0.0)

    def _state_of(self, tp: TP) -> PartitionState | None:
        return self.states.get(tp)

    @property
    def committer(self) -> Committer:
        return self._committer

    @property
    def membership(self) -> GroupMembership:
        return self._membership

    # -- main loop -----------------------------------------------------------------------------

    def run(self) -> None:
        """Poll until stopped, drain and commit, then leave. On an exception nothing more is
        committed, but the membership still leaves (its ZooKeeper session ends once no call
        runs any more), so a process that catches the error holds nothing of this run."""
        failed = True
        try:
            self.last_iteration = time.monotonic()
            self._membership.join(self._consumer, self._topics, self)
            self._poll_until_stopped()
            self._shutdown()
            failed = False
        finally:
            if failed:
                self._dispatcher.remove(self.states.values())
                self.states = {}
            try:
                self._membership.leave()
            except Exception:
                if not failed:
                    raise
                log.exception("leaving after a failure failed too")

    def _poll_until_stopped(self) -> None:
        interval = self._options.commit_interval
        next_commit = time.monotonic() + interval
        next_sample = time.monotonic() + _SAMPLE_INTERVAL
        while not self._stop.is_set():
            # While a partition is paused, poll briefly: its resume is decided between polls,
            # and a 100 ms wait for records that cannot come left its window starving (the
            # async_io bench lost a tenth of its time there).
            paused = self._backpressure.paused
            messages = self._consumer.consume(_BATCH, _PAUSED_POLL if paused else _IDLE_POLL)
            if messages:
                self._admit(messages)
            if self.inbox:
                self.inbox.run_pending()
            self._membership.tick()
            if self._topic_ids is not None:
                self._watch_topic_ids(self._topic_ids)
            if self._rewinds:
                self._backpressure.forget(self._rewinds.retry(self.states))
            self._backpressure.apply(self.states, self._dispatcher)
            self._nudge_workers()
            now = self.last_iteration = time.monotonic()
            if now >= next_commit:
                self._observe_positions()
                self._cursors.commit_async(self.states.values())
                next_commit = now + interval
            if now >= next_sample:
                self.sample_metrics()
                next_sample = now + _SAMPLE_INTERVAL

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
            if state is None:
                continue
            if self._rewinds.went_back(state, batch[0].offset()):
                self._went_back(state, batch[0].offset())
                continue
            self._dispatcher.admit(state, batch)

    def _went_back(self, state: PartitionState, first: int) -> None:
        """The fetch went below what the window took in (rewinds.py): the membership re-reads
        the partition itself, or it starts again at ``first`` once its old records ended."""
        if state.rewound_to is not None:
            return  # already waiting to start again; went_back kept the lowest offset
        if self._topic_ids is not None:
            self._topic_ids.soon()  # recreated? its new id is what the new window counts
            # The new window counts whatever log the fetch went back in: the next description
            # names it. Kept, the old id would make that description start it a second time.
            state.topic_id = ""
        if not self._membership.rewound(state.tp):
            self._rewinds.start(state, first)

    def _watch_topic_ids(self, topic_ids: TopicIds) -> None:
        """A topic with a new id was recreated: every assigned partition of it starts again
        from the new log's start (rewinds.py), before its old window's cursor is committed to
        the new topic. Its fetch may never go back: a paused partition fetches nothing, and
        librdkafka may go on fetching under the old id. Never waits (topic_ids.py).

        Every window is checked after every look, not only when the belief changed: one
        assigned on a cursor's id or a belief that proves wrong, or one whose id is unknown
        (its fetch went back), is settled at the next look."""
        topic_ids.changed()
        if topic_ids.looks != self._looks_seen:
            self._looks_seen = topic_ids.looks
            self._restart_other_incarnations(topic_ids)

    def _restart_other_incarnations(self, topic_ids: TopicIds) -> None:
        """Start again, from the new log's start, every partition whose window counts another
        incarnation of its topic than the one believed; a window that counts none known takes
        the id believed if this look's answer named it. A topic whose answers disagree is left
        until the next look."""
        described = topic_ids.described
        for state in list(self.states.values()):
            topic_id = described.get(state.topic, ("", 0))[0]
            if not topic_id or state.topic_id == topic_id or topic_ids.pending(state.topic):
                continue
            if not state.topic_id:
                # Only an id this look was answered: a look without an answer for the topic
                # (deleted just now) would name the belief from before a recreation.
                if topic_ids.answered.get(state.topic) == topic_id:
                    state.topic_id = topic_id
                continue
            if not self._membership.rewound(state.tp):
                self._rewinds.recreated(state)
            state.topic_id = topic_id  # nothing of the old window is committed (rewinds.py)

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.fatal():
            raise KafkaException(err)
        if err.code() in _TOPIC_GONE and self._topic_ids is not None:
            self._topic_ids.soon()  # deleted: look for it to come back under a new id
        log.warning("consumer error: %s", err)

    def _observe_positions(self) -> None:
        """Let cursors pass offsets never delivered (transaction markers at the end)."""
        observe_positions(self._consumer, self.states, self._dispatcher)

    def sample_metrics(self) -> None:
        """Refresh the gauges and the health view's oldest unfinished records (about once a
        second, never per record)."""
        oldest = self._sampler.sample(self.states, self._backpressure.paused)
        self.oldest_unfinished = (oldest, time.monotonic())

    # -- membership events (on this thread: rebalance callbacks are served inside consume) ----

    def assigned(self, partitions: list[TP]) -> None:
        """New partitions: read their committed cursors and parked keys, then dispatch.

        Partitions that arrive while stopping are draining from the start: nothing of theirs
        runs, and records delivered for them are given back.
        """
        self._metrics.rebalance("assigned")
        if self._topic_ids is not None:
            self._topic_ids.soon()  # a deletion rebalances: is it back under a new id?
        stopping = self._stop.is_set()
        if not partitions:
            return
        timeout = self._options.startup_timeout
        starts = self._cursors.starting_points(partitions, timeout)
        # Bounded well below the committed offsets' timeout: without an answer, the cursors
        # are judged by the id last believed (a new log read again rather than skipped), and
        # the watch's next look settles every window.
        ids = (
            self._topic_ids.at_assignment(min(timeout, CHECK_EVERY_S))
            if self._topic_ids is not None
            else {}
        )
        states: dict[TP, PartitionState] = {}
        other_incarnation: list[PartitionState] = []
        for key in partitions:
            offset, metadata = starts.get(key, (None, ""))
            topic_id = ids.get(key[0], ("", 0))[0]
            stamped = incarnation_of(metadata)
            stale = bool(topic_id and stamped and stamped != topic_id)
            if stale:
                log.warning(
                    "%s[%d]: the committed offset %s counts the log of a topic deleted since "
                    "(id %s, now %s): reading the new log from its start",
                    *key, offset, stamped, topic_id,
                )  # fmt: skip
                offset, metadata = None, ""
            done = decode_finished(offset, metadata) if offset is not None else EMPTY_RUNS
            states[key] = state = PartitionState(
                key[0],
                key[1],
                self._metrics.partition(*key),
                committed=offset,
                committed_metadata=metadata,
                already_done=done,
                phase=PartitionPhase.DRAINING if stopping else PartitionPhase.ACTIVE,
                # No id known for the topic yet: the one its cursor was committed under, so
                # that the watch starts it again if the topic proves recreated.
                topic_id=topic_id or stamped or "",
            )
            if stale:
                other_incarnation.append(state)
        if self._keystate is not None:
            # Blocked records are cleared only for keys this member runs: in key_shared mode
            # every member reads every partition, and the others' blocks are theirs.
            accepts = {tp: self._dispatcher.admission(state) for tp, state in states.items()}

            def owns(tp: TP, key: bytes | None, offset: int) -> bool:
                accept = accepts[tp]
                return accept is None or accept(key, offset)

            parked = self._keystate.load(partitions, self._options.startup_timeout, owns)
            for key, state in states.items():
                state.parked = set(parked.get(key, ()))
        self.states.update(states)
        log.info(
            "assigned %s",
            ", ".join(f"{t}[{p}]@{_at(states[(t, p)].committed)}" for t, p in partitions),
        )
        note_stale_positions(self._consumer, {tp: self.states[tp] for tp in partitions})
        # Librdkafka starts the fetch at the committed offset all the same: a stale one is
        # left by a seek before any of it is admitted (rewinds.py).
        for state in other_incarnation:
            self._rewinds.recreated(state)
        # The partitions kept meet a new id at the watch's next look, once it is believed.

    def revoked(self, partitions: list[TP]) -> bool:
        """Partitions handed to another member: drain, commit, then let them go.

        Returns whether everything in flight there finished within the drain timeout.
        """
        self._metrics.rebalance("revoked")
        self._cursors.leaving(partitions)
        revoked = [s for tp in partitions if (s := self.states.pop(tp, None))]
        try:
            if not revoked:
                return True
            return self._drain_and_commit(revoked, reason="revoke")
        finally:
            self._backpressure.release(partitions)

    def lost(self, partitions: list[TP]) -> None:
        """Partitions taken away without a revoke (session lost): commit nothing."""
        self._metrics.rebalance("lost")
        lost = [s for tp in partitions if (s := self.states.pop(tp, None))]
        self._dispatcher.remove(lost)
        # Logged once nothing of them can start any more: the line marks when the loss took
        # effect here (the chaos judge reads it as the moment).
        log.warning(
            "lost %s: in-flight results will be discarded, nothing committed",
            ", ".join(str(s) for s in lost),
        )
        self._forget(lost)
        self._backpressure.release(partitions)

    def _drain_and_commit(self, states: list[PartitionState], reason: str) -> bool:
        """Wait for what runs (bounded), commit synchronously, then let the partitions go."""
        self._dispatcher.stop_dispatching(states)
        started = time.monotonic()
        drained = self._dispatcher.wait_drained(
            states, self._options.drain_timeout, tick=self._nudge_workers
        )
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
        self._cursors.commit_sync(states)
        self._dispatcher.remove(states)
        self._forget(states)
        log.info("%s: released %s after %.3fs", reason, ", ".join(map(str, states)), elapsed)
        return drained

    def _observe_positions_for(self, states: list[PartitionState]) -> None:
        saved = self.states
        self.states = {s.tp: s for s in states}
        try:
            self._observe_positions()
        finally:
            self.states = saved

    @property
    def paused(self) -> frozenset[TP]:
        """Partitions paused because their window is full."""
        return frozenset(self._backpressure.paused)

    def _forget(self, states: list[PartitionState]) -> None:
        for state in states:
            self._sampler.forget(state.tp)
            self._metrics.forget_partition(state.topic, state.partition)
        self._backpressure.forget(state.tp for state in states)

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
            drained = self._dispatcher.wait_drained(live, 0.05, tick=self._nudge_workers)
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
            if self._cursors.commit_sync(live) or time.monotonic() >= deadline:
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
        """Let librdkafka serve rebalances and callbacks while the stop drains.

        Records it still returns (fetched before the pause took effect) are given back, not
        run: every state is draining, so the dispatcher holds each cursor below the first of
        them and the next owner gets them from the committed offset.
        """
        messages = self._consumer.consume(100, 0.1)
        self.last_iteration = time.monotonic()
        if messages:
            self._admit(messages)
        self._pause_everything()


def _at(offset: int | None) -> str:
    return "start" if offset is None else str(offset)
