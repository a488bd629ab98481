"""The incarnation stamp in the poll loop: commits name the topic id whose log they count, and
an owner refuses a committed offset of a topic deleted since (issue 35, the recreated-topic
defect the chaos suite's topic rewind found).

A topic deleted and created again under its name keeps its name; Kafka takes an offset
committed for the old log on the new one. A member whose window still counted the old log
(its fetch had not gone back, or it had not yet seen the new id) committed its cursor, say
351, and the next owner of the partition started the new log at 351, skipping its first
records. Broker-less, on the scripted consumer; the real-broker proof is
``tests/kafka/test_recreated_topic.py``.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from confluent_kafka import OFFSET_BEGINNING

from keyshared.core.offsets import incarnation_of, stamp_incarnation
from keyshared.kafka.topic_ids import TopicIds
from keyshared.settings import ConsumerOptions
from tests.kafka.support.fake_consumer import records
from tests.kafka.support.loop_harness import LoopHarness

T0 = ("t", 0)


class _Ids:
    """The poll loop's watch of the topics' ids, scripted: the topic has id ``topic_id``."""

    def __init__(self, topic_id: str) -> None:
        self.described: dict[str, tuple[str, int]] = {"t": (topic_id, 1)}
        self.looks = 0
        self.answered = {"t": topic_id}

    def changed(self) -> dict[str, tuple[str, int]] | None:
        return None

    def pending(self, _topic: str) -> bool:
        return False

    def soon(self) -> None:
        pass

    def at_assignment(self, _timeout: float) -> dict[str, tuple[str, int]]:
        return dict(self.described)


def keyed(offsets: range) -> list[object]:
    return records("t", 0, [(o, b"k%d" % o) for o in offsets])


def _offered(h: LoopHarness) -> list[int]:
    return [entry.offset for _state, entry in h.submitted]


def test_commits_name_the_topic_id_of_the_log_they_count() -> None:
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01), topic_ids=_Ids("id-A"))
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(keyed(range(3)))
    h.fake.then_wait_for(lambda: len(h.submitted) == 3)
    h.fake.then(lambda: [h.finish(o) for o in range(3)])
    h.fake.then_wait_for(lambda: h.committed(0) == 3)
    h.fake.then(h.stop.set)
    h.run()
    last = h.fake.last_commit_of(T0)
    assert last is not None and incarnation_of(last[1]) == "id-A"


def _stale_assignment(h: LoopHarness) -> None:
    """The group committed 351 for the deleted topic (id A); the partition is assigned on the
    recreated one (id B)."""
    h.fake.then_assign(T0, committed={T0: (351, stamp_incarnation("", "id-A"))})


def _new_log_from_its_start(h: LoopHarness) -> None:
    h.fake.then_wait_for(lambda: bool(h.fake.seeks))
    h.fake.then_deliver(keyed(range(2)))  # the new log, from its start
    h.fake.then_wait_for(lambda: len(h.submitted) == 2)
    h.fake.then(lambda: [h.finish(o) for o in range(2)])
    h.fake.then_wait_for(lambda: h.committed(0) == 2)
    h.fake.then(h.stop.set)


def _commits(h: LoopHarness) -> list[int]:
    return [o for call in h.fake.commits if not call.refused for _t, _p, o, _m in call.offsets]


def test_an_offset_committed_for_a_deleted_topic_is_not_where_the_new_log_starts() -> None:
    """Before: the window took 351 as its start, and the new log's records 0-350 never ran."""
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01), topic_ids=_Ids("id-B"))
    _stale_assignment(h)
    _new_log_from_its_start(h)
    h.run()
    assert h.fake.seeks == [(T0, OFFSET_BEGINNING)], "the new log was not read from its start"
    assert _commits(h) and max(_commits(h)) == 2, f"351 was committed: {_commits(h)}"
    last = h.fake.last_commit_of(T0)
    assert last is not None and incarnation_of(last[1]) == "id-B"


def test_a_refused_seek_keeps_the_partition_waiting_until_one_is_taken() -> None:
    """librdkafka refuses a seek until the partition's fetch has started, and the fetch starts
    at the committed offset. Before: the partition was resumed all the same, and the new log's
    records at the deleted topic's offset ran (the review's L2)."""
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01), topic_ids=_Ids("id-B"))
    h.fake.refuse_seeks = 10**9
    paused: list[bool] = []
    offered: list[list[int]] = []
    _stale_assignment(h)
    h.fake.then_wait_for(lambda: h.fake.refuse_seeks < 10**9 - 2)  # refused, tried again
    h.fake.then_deliver(keyed(range(351, 354)))  # the fetch started at the stale offset
    h.fake.then_wait_for(lambda: h.fake.refuse_seeks < 10**9 - 4)
    h.fake.then(lambda: paused.append(T0 in h.fake.paused))
    h.fake.then(lambda: offered.append(_offered(h)))
    h.fake.then(lambda: setattr(h.fake, "refuse_seeks", 0))
    _new_log_from_its_start(h)
    h.run()
    assert paused == [True], "resumed after a refused seek"
    assert offered == [[]], "records at the deleted topic's offset were run"
    assert h.fake.seeks == [(T0, OFFSET_BEGINNING)]
    assert max(_commits(h)) == 2


def test_an_unstamped_commit_is_trusted_as_before() -> None:
    """A commit from before stamps (or another tool's) may count either log: it is kept, as
    an at-least-once reader keeps any cursor it cannot judge."""
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01), topic_ids=_Ids("id-B"))
    h.fake.then_assign(T0, committed={T0: (5, "")})
    h.fake.then_deliver(keyed(range(5, 7)))
    h.fake.then_wait_for(lambda: len(h.submitted) == 2)
    h.fake.then(lambda: [h.finish(o) for o in range(5, 7)])
    h.fake.then_wait_for(lambda: h.committed(0) == 7)
    h.fake.then(h.stop.set)
    h.run()
    assert h.fake.seeks == []


class _LateIds(_Ids):
    """No answer at assignment (the topic not visible yet on the broker asked); the next
    description names ``topic_id``."""

    def __init__(self, topic_id: str) -> None:
        super().__init__(topic_id)
        self._later = dict(self.described)
        self.described = {}

    def changed(self) -> dict[str, tuple[str, int]] | None:
        if self.described == self._later:
            return None
        before, self.described = self.described, dict(self._later)
        self.looks += 1
        return before


def test_a_cursor_assigned_before_the_topic_could_be_described_counts_its_stamp() -> None:
    """The topic cannot be described at assignment, so the window takes the id its cursor
    was committed under (A); the next description names B, and the partition starts again
    from the new log's start. Before, the window took B as its own without a restart, and
    the new log's records below the old cursor were never read (the review's finding 1)."""
    ids = _LateIds("id-B")
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01), topic_ids=ids)
    h.fake.then_assign(T0, committed={T0: (351, stamp_incarnation("", "id-A"))})
    _new_log_from_its_start(h)
    h.run()
    assert h.fake.seeks == [(T0, OFFSET_BEGINNING)], "the new log was not read from its start"
    last = h.fake.last_commit_of(T0)
    assert last is not None and incarnation_of(last[1]) == "id-B"


class _Unanswered:
    """describe_topics never answered (the broker asked lags, or is away)."""

    def describe_topics(self, _topics: object, request_timeout: float) -> dict[str, Any]:
        failed: Future[Any] = Future()
        failed.set_exception(TimeoutError("no answer"))
        return {"t": failed}


def test_without_an_answer_a_cursor_is_judged_by_the_id_last_believed() -> None:
    """The topic was recreated (A -> B) and this member believes B; the partition's last
    owner had not seen B and committed its old window's cursor (351, stamped A). The topic
    cannot be described at assignment. Judged by B, the cursor is stale and the new log is
    read from its start; trusting the cursor's stamp (a fix tried for the review's D2)
    skipped the new log's records below 351 for as long as the belief did not change."""
    ids = TopicIds({"bootstrap.servers": "127.0.0.1:9"}, ["t"])
    ids.described = {"t": ("id-B", 1)}
    ids._admin = _Unanswered()  # type: ignore[assignment]
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01), topic_ids=ids)
    _stale_assignment(h)
    _new_log_from_its_start(h)
    h.run()
    assert h.fake.seeks == [(T0, OFFSET_BEGINNING)], "the new log was not read from its start"
    assert max(_commits(h)) == 2, f"351 was committed: {_commits(h)}"
