"""A fetch that goes back below what the window took in (keyshared/kafka/rewinds.py).

No broker: the scripted consumer delivers offsets lower than those already delivered, as
librdkafka does after an OFFSET_OUT_OF_RANGE reset (a recreated topic, a truncated log). The
real-broker proof is ``tests/coordinator/test_topic_lifecycle.py`` (a topic recreated under a
running consumer, in partition and ``key_shared`` mode).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from confluent_kafka import OFFSET_BEGINNING

from keyshared.core.offsets import incarnation_of
from keyshared.kafka.topic_ids import SOON_GAP_S, TopicIds
from keyshared.settings import ConsumerOptions
from tests.kafka.support.fake_consumer import records
from tests.kafka.support.loop_harness import LoopHarness

T0 = ("t", 0)


def keyed(offsets: range) -> list[object]:
    return records("t", 0, [(o, b"k%d" % o) for o in offsets])


def _finish(h: LoopHarness, offsets: Iterable[int]) -> None:
    for offset in offsets:
        h.finish(offset)


def _commits_of_t0(h: LoopHarness) -> list[int]:
    return [o for call in h.fake.commits if not call.refused for t, p, o, _ in call.offsets]


def _went_back_and_read_again(h: LoopHarness) -> None:
    """Offsets 0-4 done and committed; the fetch goes back to 0 (a new log, or a truncated
    one), the partition is read again from there and 0-2 finish."""
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(keyed(range(0, 5)))
    h.fake.then(lambda: _finish(h, range(5)))
    h.fake.then_wait_for(lambda: h.committed(0) == 5)
    h.fake.then_deliver(keyed(range(0, 3)))  # the fetch went back to 0
    h.fake.then_wait_for(lambda: bool(h.fake.seeks))
    h.fake.then_deliver(keyed(range(0, 3)))  # fetched again after the seek
    h.fake.then_wait_for(lambda: len(h.submitted) == 3)
    h.fake.then(lambda: _finish(h, range(3)))


def test_a_fetch_that_goes_back_reads_the_partition_again_from_there() -> None:
    """Before: the window raised "offset 0 admitted out of order" and the consumer stopped."""
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01))
    _went_back_and_read_again(h)
    h.fake.then(h.stop.set)
    h.run()
    assert h.fake.seeks == [(T0, 0)]
    assert h.committed(0) == 3, "the partition was not read again from where the fetch went"
    commits = _commits_of_t0(h)
    assert commits[-1] == 3 and 5 not in commits[commits.index(3) :]


def test_records_still_running_end_before_the_partition_starts_again() -> None:
    """The old window's records run to their end (none dropped, no two calls of a key at
    once), while nothing of it is committed and the partition stays paused."""
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01))
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(keyed(range(0, 5)))
    h.fake.then(lambda: _finish(h, range(3)))  # 3 and 4 still run
    h.fake.then_wait_for(lambda: h.committed(0) == 3)
    h.fake.then_deliver(keyed(range(0, 2)))  # the fetch goes back
    commits_before: list[int] = []
    h.fake.then(lambda: commits_before.extend(_commits_of_t0(h)))
    h.fake.then_wait_for(lambda: T0 in h.fake.paused)
    seen_while_waiting: list[object] = []
    h.fake.then(lambda: seen_while_waiting.append((list(h.fake.seeks), T0 in h.fake.paused)))
    h.fake.then(lambda: _finish(h, (3, 4)))
    h.fake.then_wait_for(lambda: bool(h.fake.seeks))
    paused_after: list[bool] = []
    h.fake.then(lambda: paused_after.append(T0 in h.fake.paused))
    h.fake.then_deliver(keyed(range(0, 2)))
    h.fake.then_wait_for(lambda: len(h.submitted) == 2)
    h.fake.then(lambda: _finish(h, range(2)))
    h.fake.then(h.stop.set)
    h.run()
    assert seen_while_waiting == [([], True)], "started again while records still ran"
    assert paused_after == [False], "the partition stayed paused after it started again"
    after = _commits_of_t0(h)[len(commits_before) :]
    assert 5 not in after, "the old log's cursor was committed after the fetch went back"
    assert h.committed(0) == 2


def test_a_record_in_its_retry_backoff_never_runs_in_the_new_log() -> None:
    """A record of the old log waits out its retry backoff when the fetch goes back: it is
    withdrawn with its window. Before, it was counted by nobody: the partition started again
    at once, and when the backoff ended the old entry was dispatched beside the new log's
    record of the same key (two calls of one key at once, the new window's bookkeeping
    corrupted)."""
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01))
    timers: list[Callable[[], None]] = []
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(records("t", 0, [(0, b"K"), (1, b"K")]))
    h.fake.then_wait_for(lambda: h.offsets() == [(0, 0)])

    def fail_into_backoff() -> None:
        state, entry = h.take(0)
        h.dispatcher.retry_later(state, entry, 12.8, lambda _delay, fire: timers.append(fire))

    h.fake.then(fail_into_backoff)
    h.fake.then_deliver(records("t", 0, [(0, b"K")]))  # the fetch goes back: a new log
    h.fake.then_wait_for(lambda: bool(h.fake.seeks))
    h.fake.then_deliver(records("t", 0, [(0, b"K"), (1, b"K")]))
    h.fake.then_wait_for(lambda: h.offsets() == [(0, 0)])
    after_backoff: list[list[tuple[int, int]]] = []

    def backoff_ends() -> None:
        for fire in timers:
            fire()
        after_backoff.append(h.offsets())

    h.fake.then(backoff_ends)
    h.fake.then(lambda: h.finish(0))
    h.fake.then_wait_for(lambda: h.offsets() == [(0, 1)])
    h.fake.then(lambda: h.finish(1))
    h.fake.then_wait_for(lambda: h.committed(0) == 2)
    h.fake.then(h.stop.set)
    h.run()
    assert after_backoff == [[(0, 0)]], "the old log's record ran beside the new log's"
    assert h.state_of(0) is None or h.state_of(0).running == 0


def test_a_record_withdrawn_from_its_backoff_is_read_again_when_the_log_still_has_it() -> None:
    """A truncated log goes back to 2 while record 0 waits out its backoff: the partition
    starts again from 0, its lowest unfinished record, not from 2 (which would skip record 0
    and commit past it)."""
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01))
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(records("t", 0, [(0, b"K"), (1, b"J"), (2, b"X"), (3, b"Y")]))
    h.fake.then_wait_for(lambda: len(h.submitted) == 4)

    def fail_into_backoff() -> None:
        state, entry = h.take(0)
        h.dispatcher.retry_later(state, entry, 12.8, lambda _delay, _fire: None)

    h.fake.then(fail_into_backoff)
    h.fake.then_deliver(records("t", 0, [(2, b"X")]))  # the log was truncated to 2
    h.fake.then_wait_for(lambda: T0 in h.fake.paused)
    h.fake.then(lambda: _finish(h, (1, 2, 3)))
    h.fake.then_wait_for(lambda: bool(h.fake.seeks))
    h.fake.then_deliver(records("t", 0, [(0, b"K"), (1, b"J"), (2, b"X")]))
    h.fake.then_wait_for(lambda: h.offsets() == [(0, 0), (0, 1), (0, 2)])
    h.fake.then(lambda: _finish(h, (0, 1, 2)))
    h.fake.then_wait_for(lambda: h.committed(0) == 3)
    h.fake.then(h.stop.set)
    h.run()
    assert h.fake.seeks == [(T0, 0)], "the partition started again above an unfinished record"


class _TopicIds:
    """The poll loop's watch of the topics' ids (keyshared/kafka/topic_ids.py), scripted."""

    def __init__(self) -> None:
        self.described: dict[str, tuple[str, int]] = {"t": ("old-id", 1)}
        self._before: dict[str, tuple[str, int]] | None = None
        self.looks = 0
        self.answered: dict[str, str] = {}

    def recreate(self) -> None:
        self._before, self.described = self.described, {"t": ("new-id", 1)}
        self.answered = {"t": "new-id"}

    def changed(self) -> dict[str, tuple[str, int]] | None:
        before, self._before = self._before, None
        if before is not None:
            self.looks += 1
        return before

    def pending(self, _topic: str) -> bool:
        return False

    def look(self, answered: bool = True) -> None:
        """An answer that names the id already believed (or a look the topic's description
        failed in: deleted just now, its broker away)."""
        self.answered = {"t": self.described["t"][0]} if answered else {}
        self.looks += 1

    def soon(self) -> None:
        """Asked at assignment: the script decides when the new id is seen."""

    def at_assignment(self, _timeout: float) -> dict[str, tuple[str, int]]:
        return dict(self.described)


def test_a_new_topic_id_starts_the_partition_again_though_its_fetch_never_went_back() -> None:
    """A paused partition fetches nothing while its topic is recreated (and librdkafka may go
    on fetching under the old id): the watch of the topic ids starts it again from the new
    log's start. Before, its window ran on, its cursor (5) was committed to the new topic,
    and the fetch went on at the old position, skipping the new log's first records."""
    ids = _TopicIds()
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01), topic_ids=ids)
    timers: list[Callable[[], None]] = []
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(keyed(range(0, 7)))
    h.fake.then_wait_for(lambda: len(h.submitted) == 7)

    def fail_into_backoff() -> None:
        state, entry = h.take(6)
        h.dispatcher.retry_later(state, entry, 12.8, lambda _delay, fire: timers.append(fire))

    h.fake.then(fail_into_backoff)
    h.fake.then(lambda: _finish(h, range(5)))  # 5 still runs, 6 waits out its backoff
    h.fake.then_wait_for(lambda: h.committed(0) == 5)
    commits_before: list[int] = []
    h.fake.then(lambda: commits_before.extend(_commits_of_t0(h)))
    h.fake.then(ids.recreate)
    h.fake.then_wait_for(lambda: T0 in h.fake.paused)
    seen_while_waiting: list[object] = []
    h.fake.then(lambda: seen_while_waiting.append(list(h.fake.seeks)))
    h.fake.then(lambda: [fire() for fire in timers])  # the backoff ends: withdrawn
    h.fake.then(lambda: h.finish(5))
    h.fake.then_wait_for(lambda: bool(h.fake.seeks))
    h.fake.then_deliver(keyed(range(0, 2)))  # the new log, from its start
    h.fake.then_wait_for(lambda: len(h.submitted) == 2)
    h.fake.then(lambda: _finish(h, range(2)))
    h.fake.then_wait_for(lambda: h.committed(0) == 2)
    h.fake.then(h.stop.set)
    h.run()
    assert seen_while_waiting == [[]], "started again while a record still ran"
    assert h.fake.seeks == [(T0, OFFSET_BEGINNING)], "not read again from the new log's start"
    after = _commits_of_t0(h)[len(commits_before) :]
    assert [o for o in after if o > 2] == [], "the old log's cursor reached the new topic"
    assert h.committed(0) == 2


def test_a_fetch_that_went_back_is_not_started_again_when_the_new_id_is_seen() -> None:
    """The review's D3: the fetch went back to the recreated topic's start, and the partition
    started again from there; the description that followed named the new id, and the watch
    started it again from the log's start, running the new log's first records (done, and
    committed) a second time. The window that starts again counts whatever log the fetch went
    back in: the next description names it instead of starting it again."""
    ids = _TopicIds()
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01), topic_ids=ids)
    _went_back_and_read_again(h)
    h.fake.then_wait_for(lambda: h.committed(0) == 3)
    h.fake.then(ids.recreate)  # the description names the new id now
    h.fake.then_deliver(keyed(range(3, 4)))
    h.fake.then_wait_for(lambda: len(h.submitted) == 1)
    h.fake.then(lambda: h.finish(3))
    h.fake.then_wait_for(lambda: h.committed(0) == 4)
    h.fake.then(h.stop.set)
    h.run()
    assert h.fake.seeks == [(T0, 0)], "started again a second time when the new id was seen"
    last = h.fake.last_commit_of(T0)
    assert last is not None and incarnation_of(last[1]) == "new-id"


def test_a_window_started_again_by_its_fetch_takes_the_next_answers_id() -> None:
    """The review of the D3 fix: a fetch that went back without a recreation (a truncated
    log) left the window with no id until the belief changed, which it never did: its commits
    went unstamped, and a later recreation was adopted without starting it again (a paused
    window's cursor would reach the new topic). It takes the id of the next answer."""
    ids = _TopicIds()
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01), topic_ids=ids)
    _went_back_and_read_again(h)  # truncated below the position: back to 0
    h.fake.then(ids.look)  # the same id, answered again
    h.fake.then_wait_for(lambda: h.committed(0) == 3)
    stamped: list[str | None] = []
    h.fake.then_wait_for(lambda: _stamp(h) == "old-id")
    h.fake.then(lambda: stamped.append(_stamp(h)))
    h.fake.then(ids.recreate)  # recreated later
    h.fake.then_wait_for(lambda: len(h.fake.seeks) == 2)
    h.fake.then(h.stop.set)
    h.run()
    assert stamped == ["old-id"], "the window's commits were left unstamped"
    assert h.fake.seeks == [(T0, 0), (T0, OFFSET_BEGINNING)], "the recreation was adopted"


def test_a_window_started_again_by_its_fetch_takes_no_id_from_a_look_without_an_answer() -> None:
    """The review of the F2 fix: the topic was recreated and the fetch went back to the new
    log's start; the next look got no answer for the topic (deleted just now). The window took
    the old belief from it, and was started a second time once the new id was believed."""
    ids = _TopicIds()
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01), topic_ids=ids)
    _went_back_and_read_again(h)
    h.fake.then(lambda: ids.look(answered=False))
    h.fake.then_wait_for(lambda: h.committed(0) == 3)
    h.fake.then(ids.recreate)  # the new id, believed
    h.fake.then_deliver(keyed(range(3, 4)))
    h.fake.then_wait_for(lambda: len(h.submitted) == 1)
    h.fake.then(lambda: h.finish(3))
    h.fake.then_wait_for(lambda: _stamp(h) == "new-id")
    h.fake.then(h.stop.set)
    h.run()
    assert h.fake.seeks == [(T0, 0)], "started again a second time when the new id was seen"


def _stamp(h: LoopHarness) -> str | None:
    last = h.fake.last_commit_of(T0)
    return incarnation_of(last[1]) if last is not None else None


class _Admin:
    """describe_topics answered at once with the id set here."""

    def __init__(self) -> None:
        self.topic_id = "old-id"
        self.asked = 0

    def describe_topics(self, _topics: object, request_timeout: float) -> dict[str, Future[Any]]:
        self.asked += 1
        future: Future[Any] = Future()
        future.set_result(SimpleNamespace(topic_id=self.topic_id, partitions=[0]))
        return {"t": future}


def test_the_topic_ids_are_described_again_at_once_when_asked_to() -> None:
    """A rebalance (the deletion makes one) or an unknown-topic error asks for the next
    description now, not in up to 5 s: a partition assigned at the old log's offset starts
    again only once the new id is seen (on a second answer, a second later)."""
    ids = TopicIds({"bootstrap.servers": "127.0.0.1:9"}, ["t"])
    admin = _Admin()
    ids._admin = admin  # type: ignore[assignment]
    assert ids.changed() is None and admin.asked == 1  # asked
    assert ids.changed() == {}  # the first answer: nothing to compare it with
    assert ids.described == {"t": ("old-id", 1)}
    admin.topic_id = "new-id"
    assert ids.changed() is None and admin.asked == 1, "asked again before 5 s"
    ids.soon()
    assert ids.changed() is None and admin.asked == 1, "asked again within a second"
    ids._asked_at -= SOON_GAP_S  # a second later
    assert ids.changed() is None and admin.asked == 2
    assert ids.changed() is None, "a lone answer believed"
    ids._asked_at -= SOON_GAP_S  # looked at again a second later, unasked
    assert ids.changed() is None and admin.asked == 3
    assert ids.changed() == {"t": ("old-id", 1)}
    assert ids.described == {"t": ("new-id", 1)}


def test_a_lone_answer_naming_another_id_is_not_believed_in_either_direction() -> None:
    """The review's D1: brokers answer from their own metadata, and one that has not caught
    up with a recreation names the old id after another named the new one. Before, the old id
    was taken for a new one and the right one retired for good: every partition of a live
    topic read again from its start, and its commits stamped with the deleted topic's id."""
    ids = TopicIds({"bootstrap.servers": "127.0.0.1:9"}, ["t"])
    admin = _Admin()
    ids._admin = admin  # type: ignore[assignment]
    admin.topic_id = "new-id"
    assert ids.at_assignment(1.0) == {"t": ("new-id", 1)}  # first seen: asked twice
    assert admin.asked == 2
    admin.topic_id = "old-id"  # a lagging broker, once
    ids.soon()
    ids._asked_at -= SOON_GAP_S
    assert ids.changed() is None  # asked
    assert ids.changed() is None and ids.described == {"t": ("new-id", 1)}
    admin.topic_id = "new-id"
    ids._asked_at -= SOON_GAP_S
    assert ids.changed() is None  # asked again at once: the lone answer is looked at again
    assert ids.changed() is None and ids.described == {"t": ("new-id", 1)}
    admin.topic_id = "newest-id"  # a real recreation: two answers in a row
    ids.soon()
    for _ in range(2):
        ids._asked_at -= SOON_GAP_S
        assert ids.changed() is None  # asked
        seen = ids.changed()
    assert seen == {"t": ("new-id", 1)} and ids.described == {"t": ("newest-id", 1)}


def test_an_assignment_never_confirms_a_lone_answer_of_the_watch() -> None:
    """The review of 49f1f21: a look got the deleted id from a lagging broker (a candidate),
    and an assignment a moment later, asking the same broker twice at once, confirmed it:
    every partition of the live topic was started again, twice."""
    ids = TopicIds({"bootstrap.servers": "127.0.0.1:9"}, ["t"])
    ids.described = {"t": ("new-id", 1)}
    admin = _Admin()
    admin.topic_id = "old-id"
    ids._admin = admin  # type: ignore[assignment]
    assert ids.changed() is None  # asked
    assert ids.changed() is None and ids.pending("t")
    ids.at_assignment(1.0)
    ids.at_assignment(1.0)
    assert ids.described == {"t": ("new-id", 1)}, "an assignment believed a lagging answer"


class _Flipping(_Admin):
    """Each description names the next id of ``ids``: brokers that disagree."""

    def __init__(self, *ids: str) -> None:
        super().__init__()
        self._ids = list(ids)

    def describe_topics(self, _topics: object, request_timeout: float) -> dict[str, Future[Any]]:
        self.topic_id = self._ids[min(self.asked, len(self._ids) - 1)]
        return super().describe_topics(_topics, request_timeout)


def test_an_assignment_judges_by_an_answer_two_in_a_row_name_and_believes_none() -> None:
    """An assignment cannot wait a second for a second answer: it asks twice at once, and
    judges its cursors by the answer when both name it, else by the id believed. Only the
    watch's next look, a second later, believes the new id (starting every partition of the
    topic again): two answers at once may come from one lagging broker."""
    ids = TopicIds({"bootstrap.servers": "127.0.0.1:9"}, ["t"])
    ids.described = {"t": ("new-id", 1)}
    ids._admin = _Flipping("old-id", "new-id")  # type: ignore[assignment]
    assert ids.at_assignment(1.0) == {"t": ("new-id", 1)}, "judged by a lone answer"
    assert ids.described == {"t": ("new-id", 1)} and not ids.pending("t")
    ids._admin = _Flipping("newest-id", "newest-id")  # type: ignore[assignment]
    assert ids.at_assignment(1.0) == {"t": ("newest-id", 1)}
    assert ids.described == {"t": ("new-id", 1)} and ids.pending("t"), "believed at once"
    ids._admin = _Flipping("newest-id")  # type: ignore[assignment]
    ids._asked_at -= SOON_GAP_S
    assert ids.changed() is None  # asked
    assert ids.changed() == {"t": ("new-id", 1)} and ids.described == {"t": ("newest-id", 1)}


def test_a_broker_without_topic_ids_names_no_id() -> None:
    """The all-zero id is what a broker that knows no topic ids answers: no id, not a new
    one (else an upgrade or a mixed cluster would read every partition again)."""
    ids = TopicIds({"bootstrap.servers": "127.0.0.1:9"}, ["t"])
    admin = _Admin()
    ids._admin = admin  # type: ignore[assignment]
    admin.topic_id = "AAAAAAAAAAAAAAAAAAAAAA"
    assert ids.at_assignment(1.0) == {"t": ("", 1)}
    admin.topic_id = "old-id"
    assert ids.at_assignment(1.0) == {"t": ("old-id", 1)}
    admin.topic_id = "AAAAAAAAAAAAAAAAAAAAAA"
    assert ids.at_assignment(1.0) == {"t": ("old-id", 1)}


class _FailingAdmin(_Admin):
    """Answers topic ``t`` and fails ``u`` (deleted and not back, or its broker away)."""

    def describe_topics(self, _topics: object, request_timeout: float) -> dict[str, Future[Any]]:
        answered = super().describe_topics(_topics, request_timeout)
        failed: Future[Any] = Future()
        failed.set_exception(TimeoutError("no answer"))
        return {**answered, "u": failed}


def test_a_topic_that_cannot_be_described_keeps_its_last_description_alone() -> None:
    ids = TopicIds({"bootstrap.servers": "127.0.0.1:9"}, ["t", "u"])
    ids.described = {"t": ("old-id", 1), "u": ("u-id", 2)}
    admin = _FailingAdmin()
    admin.topic_id = "new-id"
    ids._admin = admin  # type: ignore[assignment]
    assert ids.at_assignment(1.0) == {"t": ("new-id", 1), "u": ("u-id", 2)}
    assert ids.described == {"t": ("old-id", 1), "u": ("u-id", 2)} and ids.pending("t")
