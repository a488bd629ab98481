"""The exactly-once committer without a broker: what one transaction carries, what waits, and
what a failure does (abort or a new producer, then a redo of every live partition).

A scripted producer records every call; windows are driven by hand. The real-broker tests
(``test_exactly_once``) prove the same paths end to end.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from keyshared.core import offsets
from keyshared.core.fence_window import FENCE_SETTLE
from keyshared.core.offsets import decode_finished, encode_whole, encode_within, linked_record
from keyshared.core.window import InFlightWindow
from keyshared.kafka import transactions
from keyshared.kafka.finished_sets import FinishedSets
from keyshared.kafka.transactions import TransactionalCommitter
from keyshared.metrics import ConsumerMetrics
from keyshared.metrics.families import consumer as families
from keyshared.runtime.dispatcher import Dispatcher
from keyshared.runtime.outputs import OutputMessage
from keyshared.runtime.partition import PartitionState
from keyshared.settings import ConsumerOptions


class FakeProducer:
    instances: list[FakeProducer] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.calls: list[tuple[Any, ...]] = []
        self.fail_commit: KafkaError | None = None
        self.fail_produce: BaseException | None = None
        self.pending: list[tuple[Any, Any]] = []
        self.refuse: set[bytes] = set()  # values the broker refuses (with their whole batch)
        self.refuse_error = KafkaError(KafkaError.INVALID_RECORD)
        FakeProducer.instances.append(self)

    def init_transactions(self, timeout: float) -> None:
        self.calls.append(("init",))

    def begin_transaction(self) -> None:
        self.calls.append(("begin",))

    def produce(self, topic: str, value: Any, key: Any, **extra: Any) -> None:
        if self.fail_produce is not None:
            raise self.fail_produce
        self.calls.append(("produce", topic, key, value))
        if "on_delivery" in extra:
            self.pending.append((extra["on_delivery"], value))

    def flush(self, timeout: float) -> int:
        self.poll(0)
        return 0

    def poll(self, timeout: float) -> int:
        """Delivery reports: a batch refused as a whole reports the refusal for every message
        in it (as the broker does); alone, only the bad message is refused."""
        pending, self.pending = self.pending, []
        batch_refused = any(value in self.refuse for _, value in pending)
        for report, _value in pending:
            report(self.refuse_error if batch_refused else None, _Msg())
        return len(pending)

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], meta: Any, t: float):  # type: ignore[no-untyped-def]
        self.calls.append(("offsets", [(tp.partition, tp.offset) for tp in offsets]))

    def commit_transaction(self, timeout: float) -> None:
        if self.pending and self.refuse:
            self.flush(timeout)
            raise KafkaException(KafkaError(KafkaError.INVALID_RECORD, txn_requires_abort=True))
        if self.fail_commit is not None:
            raise KafkaException(self.fail_commit)
        self.calls.append(("commit",))

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append(("abort",))

    def purge(self) -> None:
        self.calls.append(("purge",))


class _Msg:
    def topic(self) -> str:
        return "out"

    def offset(self) -> int:
        return 7


class FakeConsumer:
    def __init__(self) -> None:
        self.seeks: list[tuple[int, int]] = []
        self.paused: set[int] = set()

    def consumer_group_metadata(self) -> str:
        return "generation-1"

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 2) for tp in tps]

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition("t", 0)]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.partition, tp.offset))

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused.update(tp.partition for tp in tps)

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused.difference_update(tp.partition for tp in tps)


class Events:
    """The poll loop's membership events, as the redo uses them."""

    def __init__(self, state: PartitionState) -> None:
        self.states = {state.tp: state}
        self.log: list[str] = []
        self.fail_after_state = 0  # assigned() calls that build the state, then raise

    def lost(self, tps: list[tuple[str, int]]) -> None:
        self.log.append("lost")
        for tp in tps:
            self.states.pop(tp)

    def assigned(self, tps: list[tuple[str, int]]) -> None:
        self.log.append("assigned")
        for tp in tps:
            self.states[tp] = PartitionState(tp[0], tp[1], None, committed=2)  # type: ignore[arg-type]
        if self.fail_after_state:
            # As the poll loop's assigned() can: states built, then reading the positions
            # (or the broker) fails before it returns.
            self.fail_after_state -= 1
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))


@pytest.fixture
def desk(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(transactions, "Producer", FakeProducer)
    FakeProducer.instances = []
    metrics = ConsumerMetrics(f"g-{uuid.uuid4().hex[:8]}", "m")
    state = PartitionState("t", 0, metrics.partition("t", 0), committed=0)
    state.window = InFlightWindow(start_offset=0, max_window=100, per_worker_capacity=100)
    consumer = FakeConsumer()
    stops: list[str] = []
    committer = TransactionalCommitter(
        consumer,
        metrics,
        Dispatcher(ConsumerOptions(), 1, lambda _w, _works: None),
        {"transactional.id": "x"},
        on_fenced=lambda: stops.append("stop"),
    )
    committer.stops = stops  # type: ignore[attr-defined]
    now = [1000.0]
    committer._clock = lambda: now[0]
    committer.now = now  # type: ignore[attr-defined]
    events = Events(state)
    committer.bind(events)  # type: ignore[arg-type]
    return committer, state, events, consumer


def _finish(state: PartitionState, *offsets: int, admitted: int = 10) -> None:
    window = state.window
    assert window is not None
    if window.in_flight == 0 and not window.waiting:
        for offset in range(admitted):
            window.admit(offset, b"k%d" % offset, worker=0, payload=None, now=0.0)
    for offset in offsets:
        window.complete(offset)
        state.outputs.stage(offset, [OutputMessage("out", b"k", b"v%d" % offset, None)])
        state.outputs.release(offset)


def test_one_transaction_carries_the_outputs_of_exactly_the_finished_records(desk: Any) -> None:
    committer, state, _, _ = desk
    producer = FakeProducer.instances[-1]
    state.outputs.stage(5, [OutputMessage("out", b"k", b"staged only", None)])  # not finished
    _finish(state, 0, 1, 3)
    committer.commit_async([state])
    assert producer.calls[1:] == [
        ("begin",),
        ("produce", "out", b"k", b"v0"),
        ("produce", "out", b"k", b"v1"),
        ("produce", "out", b"k", b"v3"),
        ("offsets", [(0, 2)]),
        ("commit",),
    ]
    assert state.committed == 2 and 5 in state.outputs.staged
    committer.commit_async([state])  # nothing moved: no transaction
    assert producer.calls[-1] == ("commit",) and committer.transactions == 1


def test_outputs_of_offsets_the_metadata_cannot_name_wait_for_a_later_commit(desk: Any) -> None:
    committer, state, _, _ = desk
    committer._max_metadata_bytes = 16  # room for the first 4 of 19 finished offsets
    _finish(state, *range(2, 40, 2), admitted=40)
    committer.commit_async([state])
    produced = [c[3] for c in FakeProducer.instances[-1].calls if c[0] == "produce"]
    kept = [offset for offset, _ in state.outputs.ready]
    assert len(produced) == 4 and len(kept) == 15, (produced, kept)
    assert min(kept) > max(int(v[1:]) for v in produced)  # the farthest from the cursor wait


def test_an_offset_a_transaction_named_stays_named_in_every_later_one(desk: Any) -> None:
    """Once a transaction committed a record's outputs with the metadata naming it, a later
    commit that left the record out would have the next owner (or a redo) run it again and
    commit its outputs twice. Offset 0 is stuck; records far from it finish first, then many
    nearer ones, more than the metadata holds: the far ones stay named, and the outputs of
    the near ones that cannot be named wait."""
    committer, state, _, _ = desk
    committer._max_metadata_bytes = 60
    state.window = InFlightWindow(start_offset=0, max_window=1000, per_worker_capacity=1000)
    rng = random.Random(5)
    far = list(range(301, 341, 2))
    near = [o for o in range(1, 300) if rng.random() < 0.5]
    _finish(state, *far, admitted=400)
    committer.commit_async([state])
    named_first = decode_finished(0, _sent(state))
    assert set(far) <= named_first
    produced = _produced()
    assert produced == far
    _finish(state, *near)
    plain = decode_finished(0, encode_within(0, state.window.finished_above_cursor(), 60).text)
    assert not named_first <= plain  # what the nearest-runs encoding would have sent
    committer.commit_async([state])
    named = decode_finished(0, _sent(state))
    assert named_first <= named
    assert state.committed_metadata == _sent(state)  # the reference of the next commit
    produced = _produced()
    assert sorted(produced) == sorted(named) and len(produced) == len(set(produced))
    waiting = [offset for offset, _ in state.outputs.ready]
    assert waiting and sorted(waiting) == sorted(set(near) - named)


def _with_side_topic(committer: TransactionalCommitter, ready: bool) -> FinishedSets:
    sides = FinishedSets({"bootstrap.servers": "127.0.0.1:1"}, "g")
    sides.ready = lambda: ready  # type: ignore[method-assign]
    committer._finished_sets = sides
    return sides


def test_an_overflowing_commit_links_a_side_record_and_produces_every_finished_output(
    desk: Any,
) -> None:
    """The metadata has room for few of 19 finished offsets; the transaction writes all 19 to
    the side record, links it from the metadata, and carries every one of their outputs."""
    committer, state, _, _ = desk
    committer._max_metadata_bytes = 16
    sides = _with_side_topic(committer, ready=True)
    _finish(state, *range(2, 40, 2), admitted=40)
    committer.commit_async([state])
    calls = FakeProducer.instances[-1].calls
    side = [c for c in calls if c[0] == "produce" and c[1] == sides.topic]
    assert len(side) == 1
    assert decode_finished(0, side[0][3].decode()) == set(range(2, 40, 2))
    assert sorted(_produced_to("out")) == list(range(2, 40, 2)) and not state.outputs.ready
    assert len(state.committed_metadata) <= 16 and linked_record(state.committed_metadata) == 7
    assert [c[0] for c in calls].index("offsets") > calls.index(side[0])


def test_a_linked_partition_is_held_while_the_side_topic_cannot_be_written(desk: Any) -> None:
    """After a commit that linked a side record, 4 KB cannot name monotonically what it named:
    without the side topic the commit is held whole (no outputs, no cursor) and retried."""
    committer, state, _, _ = desk
    committer._max_metadata_bytes = 16
    _with_side_topic(committer, ready=True)
    _finish(state, *range(2, 40, 2), admitted=50)
    committer.commit_async([state])
    transactions_before = committer.transactions
    _with_side_topic(committer, ready=False)
    _finish(state, 41, 43)
    committer.commit_async([state])
    assert committer.transactions == transactions_before
    assert sorted(o for o, _ in state.outputs.ready) == [41, 43] and state.commit_sent is None


def _side_records(sides: FinishedSets) -> list[str]:
    calls = FakeProducer.instances[-1].calls
    return [c[3].decode() for c in calls if c[0] == "produce" and c[1] == sides.topic]


def _skipped_by_next_owner(state: PartitionState, sides: FinishedSets) -> Any:
    """What a resuming owner skips: the linked side record's set (``expand``), else the
    metadata's."""
    linked = linked_record(state.committed_metadata) is not None
    text = _side_records(sides)[-1] if linked else state.committed_metadata
    return decode_finished(state.committed or 0, text)


def test_past_one_side_record_a_commit_keeps_naming_what_it_named(
    desk: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished set more fragmented than one side record may be (more runs than a reader
    takes: lowered here from 262,144 to 20) is not written: the side record would decode as
    nothing, and the next owner would redo records whose outputs are committed. The commit
    links the last side record again; the new records' outputs wait, and go out once the
    blocked key moves on and the set fits again."""
    monkeypatch.setattr(offsets, "_MAX_RUNS", 20)
    committer, state, _, _ = desk
    committer._max_metadata_bytes = 16
    sides = _with_side_topic(committer, ready=True)
    _finish(state, *range(2, 40, 2), admitted=100)  # 19 runs: one side record holds them
    committer.commit_async([state])
    first = _skipped_by_next_owner(state, sides)
    assert first == set(range(2, 40, 2)) and len(_side_records(sides)) == 1
    _finish(state, *range(41, 60, 2))  # 29 runs: past one side record
    committer.commit_async([state])
    assert len(_side_records(sides)) == 1
    assert _skipped_by_next_owner(state, sides) >= first
    assert sorted(_produced_to("out")) == list(range(2, 40, 2))
    assert sorted(o for o, _ in state.outputs.ready) == list(range(41, 60, 2))
    _finish(state, *range(3, 40, 2))  # the blocked records finish: 2..39 is one run again
    committer.commit_async([state])
    assert _skipped_by_next_owner(state, sides) == set(range(2, 40)) | set(range(41, 60, 2))
    assert sorted(_produced_to("out")) == [*range(2, 40), *range(41, 60, 2)]
    assert not state.outputs.ready


def test_a_side_record_refused_for_good_turns_the_side_topic_off(desk: Any) -> None:
    """The broker refuses the side record itself (no Write ACL on the topic): that transaction
    aborts and is redone once; the next commits fall back to metadata that names what fits
    instead of aborting every commit interval."""
    committer, state, events, _ = desk
    committer._max_metadata_bytes = 16
    sides = FinishedSets({"bootstrap.servers": "127.0.0.1:1"}, "g")
    sides._ready = True
    committer._finished_sets = sides
    refusal = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    original = FakeProducer.produce

    def produce(self: FakeProducer, topic: str, value: Any, key: Any, **extra: Any) -> None:
        if topic == sides.topic:
            raise refusal
        original(self, topic, value, key, **extra)

    FakeProducer.produce = produce  # type: ignore[method-assign]
    try:
        _finish(state, *range(2, 40, 2), admitted=40)
        committer.commit_async([state])
        assert committer.transactions == 0 and events.log == ["lost", "assigned"]
        assert not sides.ready()
        state = events.states[state.tp]  # redone from the committed offset, 2
        state.window = InFlightWindow(start_offset=2, max_window=100, per_worker_capacity=100)
        for offset in range(2, 42):
            state.window.admit(offset, b"k%d" % offset, worker=0, payload=None, now=0.0)
        _finish(state, *range(4, 40, 2))
        committer.commit_async([state])
        assert committer.transactions == 1 and events.log == ["lost", "assigned"]
        named = decode_finished(state.committed or 0, state.committed_metadata)
        assert len(named) > 0 and sorted(_produced_to("out")) == sorted(named)
    finally:
        FakeProducer.produce = original  # type: ignore[method-assign]


_RNG = random.Random(7)
_NAMED = sorted(_RNG.sample(range(4, 400, 2), 120))  # irregular: 120 runs, no 40-byte text
_GAP = _NAMED[5]


def _failed_commits(committer: TransactionalCommitter) -> float:
    labels = committer._metrics._labels
    return float(families.commits.labels(*labels, "failed")._value.get())


def _resumed_from_a_side_record(
    committer: TransactionalCommitter,
    gap: int | None,
    named: list[int] = _NAMED,
    gaps: frozenset[int] = frozenset(),
) -> PartitionState:
    """A partition as assignment builds it after ``expand``: committed at 2, its metadata the
    whole text of the side record it linked (``named``: 120 finished offsets by default), the
    window reading again from 2, where the blocked record still waits; 3, 5 and 7 finish
    since. ``gap`` (and ``gaps``): offsets the side record named that the input (compacted
    since) no longer delivers."""
    whole = encode_whole(2, named, 10**6)
    assert whole is not None
    done = decode_finished(2, whole)
    metrics = committer._metrics.partition("t", 0)
    state = PartitionState("t", 0, metrics, committed=2, committed_metadata=whole)
    size = max(named) + 2
    state.window = InFlightWindow(
        start_offset=2, max_window=size, per_worker_capacity=size, already_done=done
    )
    absent = gaps | ({gap} if gap is not None else set())
    for offset in range(2, max(401, size)):
        if offset not in absent:
            state.window.admit(offset, b"k%d" % offset, worker=0, payload=None, now=0.0)
    _finish(state, 3, 5, 7)
    assert committer._events is not None
    committer._events.states[state.tp] = state  # type: ignore[index]
    return state


@pytest.mark.parametrize("gap", [None, _GAP], ids=["whole", "compacted-gap"])
def test_a_set_read_back_from_a_side_record_is_never_named_smaller(
    desk: Any, gap: int | None
) -> None:
    """Without the side topic, a partition resumed from a side record's whole set cannot name
    it in the metadata: it keeps its last commit. With a record of that set compacted away
    (a gap now), the monotone fallback used to give up and name the runs nearest the cursor:
    97 of the 119 committed records un-named, their outputs due again after a hand-over."""
    committer, _, _, _ = desk
    committer._max_metadata_bytes = 40
    _with_side_topic(committer, ready=False)
    state = _resumed_from_a_side_record(committer, gap)
    committer.commit_async([state])
    committed = set(_NAMED) - {gap}
    named = decode_finished(state.committed or 0, state.committed_metadata)
    assert committed <= named
    assert committer.transactions == 0 and not _produced_to("out")


def test_a_fragmented_set_with_a_gap_goes_whole_to_a_side_record(
    desk: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the run cap (lowered to 130) with the side topic there: the commit names what the
    last one named, still finished, in a new side record, not the nearest runs."""
    monkeypatch.setattr(offsets, "_MAX_RUNS", 130)
    committer, _, _, _ = desk
    committer._max_metadata_bytes = 40
    sides = _with_side_topic(committer, ready=True)
    state = _resumed_from_a_side_record(committer, _GAP)
    for offset in range(401, 460, 2):  # 30 more runs: past the cap
        state.window.admit(offset, b"x%d" % offset, worker=0, payload=None, now=0.0)
        state.window.admit(offset + 1, b"y%d" % offset, worker=0, payload=None, now=0.0)
        _finish(state, offset)
    committer.commit_async([state])
    assert linked_record(state.committed_metadata) is not None
    assert set(_NAMED) - {_GAP} <= _skipped_by_next_owner(state, sides)


@pytest.mark.parametrize("regular", [True, False], ids=["fits-metadata", "side-record"])
def test_gaps_that_split_a_set_past_the_run_cap_never_make_it_unreadable(
    desk: Any, monkeypatch: pytest.MonkeyPatch, regular: bool
) -> None:
    """A partition resumed from a side record at the run cap (lowered to 40): compaction has
    since removed a record inside 5 of its runs, so what is still finished of it has 45 runs.
    Written whole, that text decodes as nothing, and the next owner would redo all 115 (or
    246) committed records; the commit sends the previous set itself again instead."""
    cap = 40
    monkeypatch.setattr(offsets, "_MAX_RUNS", cap)
    committer, _, _, _ = desk
    committer._max_metadata_bytes = 40
    sides = _with_side_topic(committer, ready=True)
    rng = random.Random(3)
    named: list[int] = []
    gaps: set[int] = set()
    start = 10
    for i in range(cap):
        length = 3 if regular else rng.randint(3, 9)
        named.extend(range(start, start + length))
        if i < 5:
            gaps.add(start + 1)
        start += length + (2 if regular else rng.randint(2, 40))
    state = _resumed_from_a_side_record(committer, None, named, frozenset(gaps))
    committer.commit_async([state])
    still = {o for o in set(named) - gaps if o > (state.committed or 0)}
    assert still <= _skipped_by_next_owner(state, sides)


def test_a_fallback_partition_with_nothing_new_is_not_a_failed_commit(desk: Any) -> None:
    """Without the side topic, a partition whose monotone fallback committed has nothing to
    send while nothing changes: no transaction, and no failed commit counted."""
    committer, state, _, _ = desk
    committer._max_metadata_bytes = 16
    _with_side_topic(committer, ready=False)
    _finish(state, *range(2, 40, 2), admitted=40)
    committer.commit_async([state])
    assert committer.transactions == 1
    failed = _failed_commits(committer)
    for _ in range(3):
        committer.commit_async([state])
    assert committer.transactions == 1 and _failed_commits(committer) == failed


def test_side_records_purged_three_times_in_a_row_turn_the_side_topic_off(desk: Any) -> None:
    """No Write ACL on the side topic: librdkafka fails AddPartitionsToTxn, makes the
    transaction abortable and purges what is queued, so the side record reports only
    _PURGE_QUEUE. Three such transactions in a row turn the topic off (each was aborted and
    redone); it used to abort every commit for ever."""
    committer, state, events, _ = desk
    committer._max_metadata_bytes = 16
    sides = FinishedSets({"bootstrap.servers": "127.0.0.1:1"}, "g")
    sides._ready = True
    committer._finished_sets = sides
    produce, poll = FakeProducer.produce, FakeProducer.poll

    def purge(self: FakeProducer, timeout: float) -> int:
        pending, self.pending = self.pending, []
        for report, _value in pending:
            report(KafkaError(KafkaError._PURGE_QUEUE), None)
        return len(pending)

    def produce_side(self: FakeProducer, topic: str, value: Any, key: Any, **extra: Any) -> None:
        produce(self, topic, value, key, **extra)
        if topic == sides.topic:
            self.pending.append((extra["on_delivery"], value))

    FakeProducer.produce = produce_side  # type: ignore[method-assign]
    FakeProducer.poll = purge  # type: ignore[method-assign]
    try:
        for attempt in range(3):
            assert sides.ready()
            state = events.states[state.tp]
            state.window = InFlightWindow(start_offset=2, max_window=100, per_worker_capacity=100)
            for offset in range(2, 42):
                state.window.admit(offset, b"k%d" % offset, worker=0, payload=None, now=0.0)
            _finish(state, *range(4, 40, 2))
            committer.commit_async([state])
            assert committer.transactions == 0 and events.log.count("lost") == attempt + 1
        assert not sides.ready()
    finally:
        FakeProducer.produce, FakeProducer.poll = produce, poll  # type: ignore[method-assign]


def test_without_the_side_topic_a_plain_partition_falls_back_to_monotone_metadata(
    desk: Any,
) -> None:
    committer, state, _, _ = desk
    committer._max_metadata_bytes = 16
    _with_side_topic(committer, ready=False)
    _finish(state, *range(2, 40, 2), admitted=40)
    committer.commit_async([state])
    named = decode_finished(0, state.committed_metadata)
    assert linked_record(state.committed_metadata) is None and 0 < len(named) < 19
    assert sorted(_produced_to("out")) == sorted(named)
    assert sorted(o for o, _ in state.outputs.ready) == sorted(set(range(2, 40, 2)) - named)


def _produced_to(topic: str) -> list[int]:
    calls = FakeProducer.instances[-1].calls
    return [int(c[3][1:]) for c in calls if c[0] == "produce" and c[1] == topic]


def _sent(state: PartitionState) -> str:
    assert state.commit_sent is not None
    return state.commit_sent[1]


def _produced() -> list[int]:
    return [int(c[3][1:]) for c in FakeProducer.instances[-1].calls if c[0] == "produce"]


def test_an_abortable_failure_aborts_and_redoes_every_live_partition(desk: Any) -> None:
    committer, state, events, consumer = desk
    producer = FakeProducer.instances[-1]
    producer.fail_commit = KafkaError(KafkaError.ILLEGAL_GENERATION, txn_requires_abort=True)
    _finish(state, 0, 1)
    assert not committer.commit_sync([state])
    assert ("abort",) in producer.calls and len(FakeProducer.instances) == 1
    assert events.log == ["lost", "assigned"] and events.states[state.tp] is not state
    assert consumer.seeks == [(0, 2)]  # back to the committed offset


def test_a_fatal_failure_replaces_the_producer_before_the_next_transaction(desk: Any) -> None:
    committer, state, events, _ = desk
    first = FakeProducer.instances[-1]
    first.fail_commit = KafkaError(KafkaError._INCONSISTENT, fatal=True)
    _finish(state, 0)
    committer.commit_async([state])
    assert ("abort",) not in first.calls and ("purge",) in first.calls
    assert events.log == ["lost", "assigned"]
    fresh = events.states[state.tp]
    fresh.window = InFlightWindow(start_offset=2, max_window=100, per_worker_capacity=100)
    fresh.window.admit(2, b"k", worker=0, payload=None, now=0.0)
    fresh.window.complete(2)
    committer.commit_async([fresh])
    second = FakeProducer.instances[-1]
    assert second is not first and second.calls[0] == ("init",) and ("commit",) in second.calls


def _aborted_with_redo_interrupted(desk: Any) -> FakeProducer:
    """Where both pending-redo tests start: records 0 and 1 committed into an abortable
    failure whose redo fails half way (its state built, then assigned() raises)."""
    committer, state, events, _ = desk
    producer = FakeProducer.instances[-1]
    producer.fail_commit = KafkaError(KafkaError.ILLEGAL_GENERATION, txn_requires_abort=True)
    events.fail_after_state = 1
    _finish(state, 0, 1)
    assert not committer.commit_sync([state])
    return producer


def test_a_redo_interrupted_after_building_a_state_still_seeks_and_resumes(desk: Any) -> None:
    """Found under a broker restart: a redo whose assigned() failed half way left a state
    behind; the retry skipped that partition as already rebuilt, so it stayed paused at a
    position nobody had set (the log said "redo: 0 partition(s) resume")."""
    committer, state, events, consumer = desk
    producer = _aborted_with_redo_interrupted(desk)
    assert consumer.paused == {0} and consumer.seeks == []  # retried before the next commit
    producer.fail_commit = None
    committer.commit_async([])
    assert consumer.seeks == [(0, 2)] and consumer.paused == set()
    assert events.states[state.tp].committed == 2


def test_a_revoke_drops_a_pending_redo_instead_of_rebuilding_the_partition(desk: Any) -> None:
    """A redo left pending (the broker did not answer) is finished before the next
    transaction, and a revoke's final commit is one: inside the revoke callback the partition
    is still in the assignment, so the pending redo built a fresh state for the partition
    being handed over, which then stayed in the poll loop after it was gone."""
    committer, state, events, consumer = desk
    producer = _aborted_with_redo_interrupted(desk)
    assert state.tp not in events.states  # pending: nothing rebuilt yet
    producer.fail_commit = None
    committer.leaving([state.tp])  # the revoke, before its final commit
    assert committer.commit_sync([])
    assert state.tp not in events.states, "the revoked partition was built again"
    assert consumer.seeks == []


@pytest.mark.parametrize("code", [KafkaError._FENCED, KafkaError.PRODUCER_FENCED])
def test_a_producer_fenced_twice_stops_the_member_and_is_never_initialised_again(
    desk: Any, code: int
) -> None:
    """A first fence may be the broker's (a transaction it timed out): a new producer and a
    redo, as for any unusable producer. A second one within the window is another live
    holder of the id: a new producer would fence it back (and the two would take turns
    failing each other's transactions), so the member stops committing, counts it and asks
    the run to stop; its shutdown commit does not wait for a commit that cannot come."""
    committer, state, events, _ = desk
    fences = families.producer_fenced.labels(*committer._metrics._labels)
    first = FakeProducer.instances[-1]
    first.fail_commit = KafkaError(code, fatal=True)
    _finish(state, 0, 1)
    committer.commit_async([state])
    assert not committer.fenced and committer.stops == []
    assert events.log == ["lost", "assigned"] and fences._value.get() == 1
    committer.now[0] += FENCE_SETTLE
    assert committer._ready()  # the new producer, built before the next transaction
    second = FakeProducer.instances[-1]
    fresh = events.states[state.tp]
    fresh.window = InFlightWindow(start_offset=2, max_window=100, per_worker_capacity=100)
    fresh.window.admit(2, b"k", worker=0, payload=None, now=0.0)
    fresh.window.complete(2)
    second.fail_commit = KafkaError(code, fatal=True)
    committer.commit_async([fresh])
    assert second is not first and second.calls[0] == ("init",)
    assert committer.fenced and committer.stops == ["stop"] and fences._value.get() == 2
    assert events.log == ["lost", "assigned"]  # no second redo: nothing is committed here now
    assert committer.commit_sync([fresh])  # the shutdown's commit: done waiting, no re-init
    assert FakeProducer.instances[-1] is second and second.calls.count(("init",)) == 1


def test_a_fenced_producer_is_replaced_only_once_the_fencing_initialisation_settled(
    desk: Any,
) -> None:
    """CI, stop 50: a lone ``init_transactions`` of the member's id (the test's fencer) met
    its open transaction. Kafka bumped the epoch to abort it (the first fence) and answered
    ``CONCURRENT_TRANSACTIONS``; the member built its replacement at once, and the fencer's
    retry, 500 ms later, bumped the epoch again: a second fence within the window, and the
    member stopped for a holder that had already gone. The replacement now waits
    ``FENCE_SETTLE`` (commits meanwhile fail and wait), so it fences the initialiser instead."""
    committer, state, events, _ = desk
    first = FakeProducer.instances[-1]
    first.fail_commit = KafkaError(KafkaError._FENCED, fatal=True)
    _finish(state, 0, 1)
    committer.commit_async([state])
    assert events.log == ["lost", "assigned"] and not committer.fenced
    failed = _failed_commits(committer)
    committer.now[0] += FENCE_SETTLE - 0.1
    assert not committer._ready(), "a replacement built while the initialiser may still retry"
    assert FakeProducer.instances[-1] is first and _failed_commits(committer) == failed + 1
    committer.now[0] += 0.1
    assert committer._ready()
    replacement = FakeProducer.instances[-1]
    assert replacement is not first and replacement.calls == [("init",)]
    assert not committer.fenced and committer.stops == []


def _fenced_behind_fatal(producer: FakeProducer) -> None:
    """As librdkafka does once a fence made the producer fail for good: ``produce()`` answers
    only _FATAL, and the next poll raises the cause (confluent-kafka's error_cb)."""
    producer.fail_produce = KafkaException(KafkaError(KafkaError._FATAL))
    cause = KafkaException(KafkaError(KafkaError._FENCED, fatal=True))

    def poll(timeout: float) -> int:
        raise cause

    producer.poll = poll  # type: ignore[method-assign]


def test_a_fence_seen_as_a_fatal_produce_is_still_a_fence(desk: Any) -> None:
    """The 30-minute exclusive run's fence surfaced as "Unable to produce message: Local:
    Fatal error": taken for an ordinary failure, it was never counted, logged or given up on,
    and a second fence did not stop the member (two holders of one id would fence each other
    for ever). The cause, which the next poll raises, decides."""
    committer, state, events, _ = desk
    fences = families.producer_fenced.labels(*committer._metrics._labels)
    _fenced_behind_fatal(FakeProducer.instances[-1])
    _finish(state, 0, 1)
    committer.commit_async([state])
    assert fences._value.get() == 1 and not committer.fenced
    assert events.log == ["lost", "assigned"]
    committer.now[0] += FENCE_SETTLE
    assert committer._ready()
    _fenced_behind_fatal(FakeProducer.instances[-1])
    fresh = events.states[state.tp]
    fresh.window = InFlightWindow(start_offset=2, max_window=100, per_worker_capacity=100)
    fresh.window.admit(2, b"k", worker=0, payload=None, now=0.0)
    fresh.window.complete(2)
    fresh.outputs.stage(2, [OutputMessage("out", b"k", b"v2", None)])
    fresh.outputs.release(2)
    committer.commit_async([fresh])
    assert committer.fenced and committer.stops == ["stop"] and fences._value.get() == 2


def test_an_unexpected_exception_inside_the_transaction_recovers_instead_of_escaping(
    desk: Any,
) -> None:
    """Whatever the producer raises (here a TypeError, as confluent-kafka raises for a value it
    cannot send), the transaction is settled and redone; it never escapes the poll loop with
    the transaction left open."""
    committer, state, events, _ = desk
    first = FakeProducer.instances[-1]
    first.fail_produce = TypeError("a bytes-like object is required, not 'dict'")
    _finish(state, 0)
    committer.commit_async([state])
    assert ("purge",) in first.calls and events.log == ["lost", "assigned"]
    assert not committer.fenced


def test_a_refused_output_is_pinned_to_its_own_record_not_to_its_batch(desk: Any) -> None:
    """The broker refuses a whole batch for one bad record, so every output of the failed
    transaction reports the refusal. Probing each suspect alone, in a transaction that is
    always aborted, finds the one record whose own output is refused; only it is pinned (and
    dead-lettered when redone), the others run again."""
    committer, state, events, _ = desk
    producer = FakeProducer.instances[-1]
    producer.refuse = {b"v1"}
    _finish(state, 0, 1, 2)
    committer.commit_async([state])
    assert ("abort",) in producer.calls and events.log == ["lost", "assigned"]
    assert set(committer.output_rules.refused) == {("t", 0, 1)}
    probes = producer.calls[producer.calls.index(("abort",)) + 1 :]
    assert probes.count(("begin",)) == 3 and probes.count(("abort",)) == 3
    assert ("commit",) not in probes  # a probe is never committed
    refusal = committer.output_rules.take_refusal("t", 0, 1)
    assert refusal is not None and "INVALID_RECORD" in str(refusal)
    assert committer.output_rules.take_refusal("t", 0, 1) is None  # once


def test_a_send_offsets_call_that_never_returns_gives_the_producer_up_and_redoes(
    desk: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """librdkafka can ignore send_offsets_to_transaction's timeout once the group coordinator
    it cached is gone (seen after a broker restart): the poll loop then stopped for good, no
    commit and no stop ever again. The call is now bounded by the poll loop: the producer is
    given up (never touched again), the partitions are redone and a new producer commits."""
    monkeypatch.setattr(transactions, "_OFFSETS_WATCHDOG", 0.2)
    committer, state, events, _ = desk
    stuck = FakeProducer.instances[-1]
    release = threading.Event()

    def never_returns(*_args: Any) -> None:
        release.wait(30)

    stuck.send_offsets_to_transaction = never_returns  # type: ignore[method-assign]
    _finish(state, 0, 1)
    started = time.monotonic()
    committer.commit_async([state])
    assert time.monotonic() - started < 5, "the poll loop waited for a call that never returns"
    assert events.log == ["lost", "assigned"]
    assert ("purge",) not in stuck.calls, "a given-up producer was touched again"
    fresh = events.states[state.tp]
    fresh.window = InFlightWindow(start_offset=2, max_window=100, per_worker_capacity=100)
    fresh.window.admit(2, b"k", worker=0, payload=None, now=0.0)
    fresh.window.complete(2)
    committer.commit_async([fresh])
    assert FakeProducer.instances[-1] is not stuck
    assert ("commit",) in FakeProducer.instances[-1].calls
    release.set()


def _failed_commits(committer: TransactionalCommitter) -> float:
    return float(families.commits.labels(*committer._metrics._labels, "failed")._value.get())


def test_a_commit_that_cannot_start_counts_as_failed(
    desk: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36 D6: with no producer (the broker away, an authorization failure) or a redo
    that cannot read the committed offsets, nothing was committed and nothing counted: the
    commit-failure alert stayed quiet while outputs and offsets waited."""
    committer, state, _, consumer = desk
    _finish(state, 0)
    committer._producer = None

    def refuse(self: FakeProducer, timeout: float) -> None:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    monkeypatch.setattr(FakeProducer, "init_transactions", refuse)
    before = _failed_commits(committer)
    committer.commit_async([state])
    assert _failed_commits(committer) == before + 1 and committer.transactions == 0
    monkeypatch.undo()
    monkeypatch.setattr(transactions, "Producer", FakeProducer)

    def away() -> list[TopicPartition]:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    committer._redo._pending.add(("t", 1))
    monkeypatch.setattr(consumer, "assignment", away)
    committer.commit_async([state])
    assert _failed_commits(committer) == before + 2 and committer.transactions == 0

    standby = TransactionalCommitter(
        consumer,
        committer._metrics,
        Dispatcher(ConsumerOptions(), 1, lambda _w, _works: None),
        {"transactional.id": "x"},
        role=True,
    )
    standby.commit_async([state])  # a standby commits nothing, and that is no failure
    assert _failed_commits(committer) == before + 2


def _two_partitions_of(desk: Any, size: int) -> tuple[PartitionState, PartitionState]:
    """Partition 0 of the desk and a partition 1, each with offsets 0 and 1 finished and
    outputs of ``size`` bytes; partition 1's waited longer."""
    _, first, events, _ = desk
    second = PartitionState("t", 1, first.metrics, committed=0)
    second.window = InFlightWindow(start_offset=0, max_window=100, per_worker_capacity=100)
    events.states[second.tp] = second
    for state in (first, second):
        _finish(state)
        for offset in (0, 1):
            state.window.complete(offset)
            value = b"%d-%d:" % (state.partition, offset)
            message = OutputMessage("out", None, value.ljust(size // 2, b"x"), None)
            state.outputs.stage(offset, [message])
            state.outputs.release(offset)
    first.outputs.since, second.outputs.since = 2.0, 1.0
    return first, second


def test_a_commit_over_the_byte_bound_goes_in_transactions_of_whole_partitions(desk: Any) -> None:
    """Issue 36 D6: the backlog of a held commit (a DLQ topic created after an outage) went
    out in one transaction, which could outlast transaction_timeout, abort, be redone and
    carry the same volume again, never committing. Each transaction now carries whole
    partitions under the bound, their offsets with exactly their outputs, oldest first."""
    committer, _, _, _ = desk
    committer._max_transaction_bytes = 100
    first, second = _two_partitions_of(desk, 60)
    committer.commit_async([first, second])
    calls = FakeProducer.instances[-1].calls
    transactions_ = _split(calls)
    assert [
        ([c[3][:4] for c in t if c[0] == "produce"], [c[1] for c in t if c[0] == "offsets"])
        for t in transactions_
    ] == [
        ([b"1-0:", b"1-1:"], [[(1, 2)]]),
        ([b"0-0:", b"0-1:"], [[(0, 2)]]),
    ]
    assert all(t[-1] == ("commit",) for t in transactions_) and committer.transactions == 2
    assert first.committed == second.committed == 2


def test_a_failed_transaction_of_a_split_commit_gives_the_later_partitions_outputs_back(
    desk: Any,
) -> None:
    committer, _, events, _ = desk
    committer._max_transaction_bytes = 100
    first, second = _two_partitions_of(desk, 60)
    held = list(first.outputs.ready)
    producer = FakeProducer.instances[-1]
    producer.fail_commit = KafkaError(KafkaError.ILLEGAL_GENERATION, txn_requires_abort=True)
    assert not committer.commit_sync([first, second])
    assert producer.calls.count(("begin",)) == 1  # stopped at the first failure
    assert events.states.get(second.tp) is not second  # the failed one is redone
    assert events.states[first.tp] is first and first.outputs.ready == held
    assert first.commit_sent is None and first.outputs.ready_bytes == 60


def _split(calls: list[tuple[Any, ...]]) -> list[list[tuple[Any, ...]]]:
    """The producer's calls, one list per transaction (begin .. commit/abort)."""
    out: list[list[tuple[Any, ...]]] = []
    for call in calls:
        if call == ("begin",):
            out.append([])
        elif out:
            out[-1].append(call)
    return out
