"""A fetch that goes back: the partition's log is no longer the one its window read.

librdkafka resets a partition's fetch position when the broker answers OFFSET_OUT_OF_RANGE:
the topic was deleted and created again under the same name (a new log, from offset 0), or the
log was truncated below the position (an unclean leader election), or retention passed it. A
reset forward only skips offsets (the window lets its cursor pass them). A reset **back**
delivers offsets below what the window has taken in: the window cannot take them (it admits in
offset order), and its cursor describes the old log, so committing it would count records of
the new log as done that never ran; a ``key_shared`` member's low-watermark commit would put
the old log's offsets on the new topic (``tests/coordinator/test_topic_lifecycle.py``
recreates a topic under a running group).

So the partition starts again where the fetch went back to, as if newly assigned with nothing
committed:

- from the moment the fetch goes back, nothing of the old window is committed
  (:attr:`PartitionState.rewound_to` keeps the committer off it);
- what the old window already took in still runs to its end (no record it holds is dropped),
  while the partition is paused and what arrives meanwhile is dropped; once nothing of it runs,
  the window is dropped and the consumer seeks to the lowest offset the fetch went back to;
- a mode that reads from cursors of its own re-reads them instead (``key_shared``:
  :meth:`keyshared.kafka.seams.GroupMembership.rewound`), since its claims describe the old log too.

A fetch need not go back when the topic is recreated: a paused partition fetches nothing, and
librdkafka may go on fetching a recreated topic under its old id (librdkafka issue #4898). Its
window would then run on, commit the old log's cursor to the new topic, and resume at the old
position in the new log, skipping the new log's first records (the chaos suite's topic rewind
lost 1,291 that way). So the poll loop also watches its topics' ids
(:mod:`keyshared.kafka.topic_ids`): a new id starts every assigned partition of the topic again
the same way, from the new log's start (:meth:`Rewinds.recreated`).

Poll thread only, like the rest of the poll loop.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from keyshared.core.runs import EMPTY_RUNS
from keyshared.core.types import TP
from keyshared.kafka.kafka_consumer import KafkaConsumer
from keyshared.runtime.dispatcher import Dispatcher
from keyshared.runtime.partition import PartitionState

__all__ = ["Rewinds"]

log = logging.getLogger(__name__)

SEEK_REFUSED_WARN_S = 10.0
"""How long a partition waits on a refused seek before it is logged as a warning."""


class Rewinds:
    """The partitions whose fetch went back, until each starts again.

    :param consumer: the poll loop's consumer (pause, seek, resume).
    :param dispatcher: whose window of the partition starts again.
    """

    def __init__(self, consumer: KafkaConsumer, dispatcher: Dispatcher) -> None:
        self._consumer = consumer
        self._dispatcher = dispatcher
        self._pending: dict[TP, PartitionState] = {}
        # When each partition's seek was first refused (None: the wait was logged).
        self._refused_since: dict[TP, float | None] = {}

    def __bool__(self) -> bool:
        return bool(self._pending)

    def went_back(self, state: PartitionState, first: int) -> bool:
        """Whether a batch starting at ``first`` goes back below what ``state``'s window took
        in, or arrives while the partition waits to start again (then it is not admitted)."""
        if state.rewound_to is not None:
            state.rewound_to = min(state.rewound_to, first)
            return True
        window = state.window
        return window is not None and first < window.seen_end

    def start(self, state: PartitionState, first: int) -> None:
        """The fetch of ``state`` went back to ``first``: pause it, commit none of it, and
        start it again at ``first`` once the old window's records ended (:meth:`retry`)."""
        window = state.window
        log.warning(
            "%s: the fetch went back from %s to %d (the topic was recreated, or its log "
            "truncated): reading it again from %d once the %d record(s) still running there "
            "end; nothing of the old position is committed",
            state,
            window.seen_end if window is not None else "?",
            first,
            first,
            state.running,
        )
        self._start(state, first)

    def recreated(self, state: PartitionState) -> None:
        """The topic of ``state`` has a new id (:mod:`keyshared.kafka.topic_ids`): start it
        again as a fetch that went back to the new log's start, whether or not its fetch goes
        back (a paused partition fetches nothing; librdkafka may go on fetching under the old
        id). Already waiting to start again: from the new log's start, then."""
        log.warning(
            "%s: the topic was recreated (a new topic id): reading it again from the new log's "
            "start once the %d record(s) still running there end; nothing of the old position "
            "is committed",
            state,
            state.running,
        )
        if state.rewound_to is not None:
            state.rewound_to = OFFSET_BEGINNING
            return
        self._start(state, OFFSET_BEGINNING)

    def _start(self, state: PartitionState, first: int) -> None:
        state.rewound_to = first
        self._pending[state.tp] = state
        self._dispatcher.rewinding(state)  # old-log records in a retry backoff never run again
        with contextlib.suppress(KafkaException, RuntimeError):
            self._consumer.pause([TopicPartition(*state.tp)])

    def retry(self, states: Mapping[TP, PartitionState]) -> list[TP]:
        """Start again every waiting partition whose old records ended; the partitions that
        started (their pause is no longer the window's: the caller forgets it)."""
        started: list[TP] = []
        for tp, state in list(self._pending.items()):
            if states.get(tp) is not state or state.rewound_to is None:
                del self._pending[tp]  # revoked or lost meanwhile: nothing left to start
                self._refused_since.pop(tp, None)
                continue
            unfinished = self._dispatcher.restart(state)
            if unfinished is None:
                continue
            # From where the fetch went back, or from the old window's lowest unfinished
            # record if that is lower (a truncated log still has it; a recreated one starts
            # at 0 anyway): nothing the old window had not finished is skipped.
            offset = state.rewound_to if unfinished < 0 else min(state.rewound_to, unfinished)
            state.committed, state.committed_metadata, state.commit_sent = None, "", None
            state.already_done = EMPTY_RUNS
            state.high_watermark = state.stale_position = None
            try:
                self._consumer.seek(TopicPartition(state.topic, state.partition, offset))
            except KafkaException as exc:
                # Not fetching yet (librdkafka refuses a seek until its fetch started): the
                # position it starts from may be the old log's, so it waits, paused, and
                # tries again at the next turn of the loop.
                state.rewound_to = offset
                self._refused(state, offset, exc)
                continue
            state.rewound_to = None
            del self._pending[tp]
            self._refused_since.pop(tp, None)
            with contextlib.suppress(KafkaException, RuntimeError):
                self._consumer.resume([TopicPartition(*tp)])
            log.info("%s: reading again from %s", state, _offset(offset))
            started.append(tp)
        return started

    def _refused(self, state: PartitionState, offset: int, exc: KafkaException) -> None:
        """A seek librdkafka refused: said once the partition has waited
        :data:`SEEK_REFUSED_WARN_S` for it (e.g. ``auto.offset.reset=error`` never lets the
        fetch start, or the topic is gone for good), since nothing else shows the wait."""
        now = time.monotonic()
        since = self._refused_since.setdefault(state.tp, now)
        if since is not None and now - since >= SEEK_REFUSED_WARN_S:
            self._refused_since[state.tp] = None  # once
            log.warning(
                "%s: waiting %.0fs to read the partition again from %s: librdkafka refuses "
                "the seek (%s); nothing of it runs meanwhile",
                state, now - since, _offset(offset), exc,
            )  # fmt: skip
        else:
            log.debug("%s: seek to %s failed, trying again: %s", state, _offset(offset), exc)


def _offset(offset: int) -> str:
    return "the log's start" if offset == OFFSET_BEGINNING else str(offset)
