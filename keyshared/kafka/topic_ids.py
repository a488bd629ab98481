"""Kafka's ids and partition counts of a consumer's topics, described without blocking.

A topic deleted and created again under the same name gets a new topic id, and nothing else
tells a running consumer reliably: a partition's fetch goes back to the new log's start only
if it fetches at all (a paused partition does not), and librdkafka may go on fetching a
recreated topic under its old id (librdkafka issue #4898). So the members describe their
topics every few seconds with an admin client:

- the Kafka-committing modes (partition, partition leases, exclusive): the poll loop starts
  every assigned partition of a topic with a new id again from the new log's start
  (:mod:`keyshared.kafka.rewinds`), before its old window's cursor reaches the new topic;
- ``key_shared``: :class:`keyshared.modes.topic_watch.TopicWatch` drops the cursors of the old
  incarnation and reads partitions added meanwhile.

:meth:`TopicIds.changed` is called from the poll thread and never waits: a description is
started there and its futures are only looked at once the broker answered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from keyshared.errors import KeySharedError
from keyshared.kafka.client_config import client_properties

__all__ = ["CHECK_EVERY_S", "SOON_GAP_S", "Described", "TopicIds"]

log = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0  # how often the topics are described (partition count, topic id)
SOON_GAP_S = 1.0  # the least time between two descriptions asked for sooner (:meth:`soon`)
_NO_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # the all-zero Uuid: a broker that knows no topic ids

Described = dict[str, tuple[str, int]]  # topic -> (topic id, partitions)


class TopicIds:
    """The last description of ``topics`` (their ids and partition counts).

    A new id is believed once two answers in a row, a second or more apart, name it: brokers
    answer from their own metadata, and one that has not caught up with a recreation may name
    the old id after another named the new one, or the other way round. Each believed change
    starts every partition of the topic again, so a lone answer must not flip it, in either
    direction. An assignment, which cannot wait, judges its cursors on an answer of its own
    (asked twice when it names another id than the one believed), but only the watch's next
    look believes it. A broker that knows no topic ids answers the all-zero id, which is no
    id ("").

    :param kafka_config: the consumer's config (connection and security are reused).
    :param topics: the topics described (names, not patterns).
    """

    def __init__(self, kafka_config: Mapping[str, Any], topics: list[str]) -> None:
        self._admin = AdminClient({"log_level": 3, **client_properties(kafka_config)})
        self._topics = list(topics)
        self.described: Described = {}
        self._candidates: dict[str, str] = {}  # a new id answered once, per topic
        self._pending: dict[str, Future[Any]] | None = None
        self._next_check = 0.0
        self._asked_at = -SOON_GAP_S
        self._again = False  # described again as soon as the pending answer is in
        self.looks = 0  # answers taken in so far (the poll loop checks its windows after each)
        self.answered: dict[str, str] = {}  # the ids the last look's answers named, per topic

    def describe(self, timeout: float) -> Described:
        """Describe the topics now (bounded); raises naming a topic that cannot be described.
        A new id is believed when a second description, asked at once, names it too."""
        answers = {t: _result(t, f, timeout) for t, f in self._ask(timeout).items()}
        unsure = self._unsure(answers)
        if unsure:
            again = {t: _result(t, f, timeout) for t, f in self._ask(timeout).items()}
            answers = {t: a for t, a in answers.items() if t not in unsure or again[t] == a}
        self.described = self._merged(answers, believe="now")
        self._next_check = time.monotonic() + CHECK_EVERY_S
        self.looks += 1
        return self.described

    def at_assignment(self, timeout: float) -> Described:
        """The ids to judge the cursors of partitions being assigned by: each topic as the
        broker answers now within ``timeout`` (asked twice when it names another id than the
        one believed; two answers that differ count as none), else as last believed. Judging
        on the last belief when there is no answer errs toward reading a new log again, never
        toward skipping one. An answer naming another id is the first of the two the watch
        needs to believe it. A description under way is dropped: it may have been asked
        before a recreation this one sees.

        Caller: the poll loop's assignment (poll thread). Affects: the description (a first
        id, a candidate), when the watch looks next."""
        self._pending = None
        answers = self._answers(timeout)
        unsure = self._unsure(answers)
        if unsure:
            again = self._answers(timeout)
            for topic in unsure:
                if again.get(topic) != answers[topic]:
                    log.warning(
                        "topic %s: two descriptions in a row named ids %s and %s: its "
                        "partitions assigned now are judged by the id last believed",
                        topic,
                        answers[topic][0],
                        again.get(topic, ("none", 0))[0],
                    )
                    del answers[topic]
        if len(answers) < len(self._topics):
            self._again = True
        self._asked_at = time.monotonic()
        self.described = self._merged(answers, believe="never")
        self._next_check = time.monotonic() + CHECK_EVERY_S
        self.looks += 1
        judged = dict(self.described)
        for topic, (topic_id, count) in answers.items():
            if topic_id:
                judged[topic] = (topic_id, count)
        return judged

    def pending(self, topic: str) -> bool:
        """Whether an answer named another id for ``topic`` than the one believed, and the
        next look decides which holds (a window is then left alone until it has).

        Caller: the poll loop, after a look (poll thread). Affects: nothing."""
        return topic in self._candidates

    def _ask(self, timeout: float) -> dict[str, Future[Any]]:
        futures: dict[str, Future[Any]] = self._admin.describe_topics(
            TopicCollection(self._topics), request_timeout=timeout
        )
        return futures

    def _answers(self, timeout: float) -> dict[str, tuple[str, int]]:
        """The topics answered within ``timeout``; those that failed are left out (logged)."""
        try:
            futures = self._ask(timeout)
        except KafkaException as exc:
            log.warning("describing the topics at assignment failed (%s): the partitions "
                        "assigned now are judged by the ids last believed", exc)  # fmt: skip
            return {}
        answers: dict[str, tuple[str, int]] = {}
        for topic, future in futures.items():
            try:
                answers[topic] = _result(topic, future, timeout)
            except KeySharedError as exc:
                log.warning("%s: its partitions assigned now are judged by the id last "
                            "believed", exc)  # fmt: skip
        return answers

    def _unsure(self, answers: Mapping[str, tuple[str, int]]) -> set[str]:
        """The topics answered with an id other than the one last believed (or a first id)."""
        return {
            topic
            for topic, (topic_id, _count) in answers.items()
            if topic_id and topic_id != self.described.get(topic, ("", 0))[0]
        }

    def soon(self) -> None:
        """Describe the topics at the next look (after the one under way, if any, and at most
        once a second), not in up to 5 s: the group rebalanced, a fetch went back, or the
        consumer met an unknown topic (a deletion makes the group rebalance, and a partition
        assigned at an old log's offset is started again only once the new id is seen).

        Caller: the poll loop (poll thread). Affects: when :meth:`changed` asks next."""
        self._again = True

    def changed(self) -> Described | None:
        """The description before, when a topic got partitions or a new id since the last
        look; None when nothing changed or no answer is in yet (never waits).

        A topic that cannot be described now (deleted and not yet back, its broker away)
        keeps its last description: it is looked at again next time.
        """
        now = time.monotonic()
        if self._pending is None:
            soon = self._again and now >= self._asked_at + SOON_GAP_S
            if now >= self._next_check or soon:
                self._next_check, self._asked_at, self._again = now + CHECK_EVERY_S, now, False
                self._pending = self._admin.describe_topics(
                    TopicCollection(self._topics), request_timeout=CHECK_EVERY_S
                )
            return None
        if not all(future.done() for future in self._pending.values()):
            if now >= self._next_check + CHECK_EVERY_S:
                log.warning("describing the topics got no answer in %ss", CHECK_EVERY_S * 2)
                self._pending = None  # and ask again
            return None
        pending, self._pending = self._pending, None
        answers: dict[str, tuple[str, int]] = {}
        for topic, future in pending.items():
            try:
                answers[topic] = _result(topic, future, 0)
            except KeySharedError as exc:  # deleted right now, broker away: look again later
                log.debug("%s", exc)
        now_described = self._merged(answers, believe="second")
        self.looks += 1
        if now_described == self.described:
            return None
        before, self.described = self.described, now_described
        return before

    def _merged(self, answers: Mapping[str, tuple[str, int]], believe: str) -> Described:
        """The description with ``answers`` taken in: a topic not answered keeps its last
        description, and a new id replaces the believed one only as ``believe`` allows:
        ``"now"`` (two answers asked at once agreed: a start), ``"second"`` (a watch's look:
        it confirms the candidate of an earlier answer) or ``"never"`` (an assignment's
        answers, asked at once, possibly of one lagging broker: they only name a candidate).
        A first id is believed at once. Records which ids these answers named."""
        self.answered = {topic: topic_id for topic, (topic_id, _) in answers.items() if topic_id}
        merged = dict(self.described)
        for topic, (topic_id, count) in sorted(answers.items()):
            old_id, old_count = merged.get(topic, ("", 0))
            if topic_id and old_id and topic_id != old_id:
                confirms = believe == "now" or (
                    believe == "second" and self._candidates.get(topic) == topic_id
                )
                if not confirms:
                    log.info("topic %s: a description names id %s, not %s: looking again",
                             topic, topic_id, old_id)  # fmt: skip
                    self._candidates[topic] = topic_id
                    self._again = True
                    continue
                log.warning("topic %s has a new id (%s -> %s): recreated", topic, old_id, topic_id)
            elif old_id and count != old_count:
                log.info("topic %s: %d partition(s), was %d", topic, count, old_count)
            self._candidates.pop(topic, None)
            merged[topic] = (topic_id or old_id, count)
        return merged


def _result(topic: str, future: Future[Any], timeout: float) -> tuple[str, int]:
    """A topic's id ("" when the broker knows none) and partition count."""
    try:
        described = future.result(timeout=timeout)
    except (KafkaException, TimeoutError) as exc:
        raise KeySharedError(f"describing topic {topic!r} failed: {exc}") from None
    topic_id = str(described.topic_id)
    return ("" if topic_id == _NO_ID else topic_id), len(described.partitions)
