"""The dispatcher without threads or a broker: admission, settlement, block/release, drains.

Submitted work is collected in a list and finished by the test, so each interleaving is exact.
The hypothesis state machine in ``test_dispatcher_machine.py`` drives the same class through
random interleavings; these are the named cases.
"""

from __future__ import annotations

import gc
import logging
import uuid
import weakref
from typing import Any

import pytest
from prometheus_client import REGISTRY

from keyshared.core.window import Entry
from keyshared.kafka.backpressure import Backpressure
from keyshared.metrics import ConsumerMetrics
from keyshared.runtime.dispatcher import LIVENESS_HOLD, Dispatcher, Work
from keyshared.runtime.outputs import OutputMessage
from keyshared.runtime.partition import PartitionState
from keyshared.settings import ConsumerOptions
from tests.kafka.support.fake_consumer import FakeMessage, records


class Bench:
    """A dispatcher over one partition whose workers are ``self.submitted``."""

    def __init__(self, **options: Any) -> None:
        self.options = ConsumerOptions(**options)
        self.submitted: list[Work] = []
        self.dispatcher = Dispatcher(self.options, 4, lambda w, works: self.submitted.extend(works))
        metrics = ConsumerMetrics(f"g-{uuid.uuid4().hex[:8]}", "m")
        self.state = PartitionState("t", 0, metrics.partition("t", 0), committed=0)

    def admit(self, items: list[tuple[int, bytes | None]]) -> None:
        self.dispatcher.admit(self.state, records("t", 0, items))

    def take(self, offset: int) -> Entry[Any]:
        for i, (_, entry) in enumerate(self.submitted):
            if entry.offset == offset:
                return self.submitted.pop(i)[1]
        raise AssertionError(f"offset {offset} not dispatched; have {self.dispatched()}")

    def dispatched(self) -> list[int]:
        return sorted(e.offset for _, e in self.submitted)

    @property
    def cursor(self) -> int:
        assert self.state.window is not None
        return self.state.window.safe_cursor


# -- item 4: max_window bounds memory ---------------------------------------------------------


def test_a_stuck_record_holds_back_only_its_key() -> None:
    """Issue 23: finished records above a stuck one hold no state and do not count towards
    ``max_window`` (that halved throughput at 8 records per key, and paused a partition 10,000
    records behind one stuck key); only unfinished records do, and the stuck key's own records
    waiting behind it are what fills the window."""
    b = Bench(max_window=100)
    b.admit([(0, b"stuck")])
    b.take(0)  # never finishes
    for offset in range(1, 1000):
        b.admit([(offset, b"k%d" % offset)])
        b.dispatcher.finish(b.state, b.take(offset))
    window = b.state.window
    assert window is not None
    assert not window.should_pause(), "paused behind one stuck record"
    assert window.finished_above_cursor().runs == ((1, 1000),)
    b.admit([(offset, b"stuck") for offset in range(1000, 1099)])  # wait behind the stuck one
    assert window.size == 100 and window.should_pause()


def test_finished_records_release_their_payload() -> None:
    """A finished record waiting for the cursor keeps its offset, not its message."""
    b = Bench()
    b.admit([(0, b"stuck")])
    b.take(0)
    message = FakeMessage("t", 0, 1, b"other", b"x" * 1000)
    ref = weakref.ref(message)
    b.dispatcher.admit(b.state, [message])
    b.dispatcher.finish(b.state, b.take(1))
    del message
    gc.collect()
    assert ref() is None, "a finished record's message is still held by the window"
    assert b.state.window is not None and list(b.state.window.finished_above_cursor()) == [1]


# -- item 5: unordered null keys under block ----------------------------------------------------


def test_blocked_null_key_records_are_all_kept_and_all_released() -> None:
    """Unordered null-key records are independent: blocking two must keep both, and a release
    of the null key must free both (before: the second overwrote the first, which then held
    the cursor for good)."""
    b = Bench(poison="block")
    b.admit([(0, None), (1, None), (2, b"a")])
    first, second = b.take(0), b.take(1)
    b.dispatcher.block(b.state, first, "boom")
    b.dispatcher.block(b.state, second, "boom")
    b.dispatcher.finish(b.state, b.take(2))
    assert b.cursor == 0
    assert b.dispatcher.release(b.state, None, retry=False) == "blocked"
    assert b.cursor == 3, "a blocked null-key record was lost: the cursor stays pinned"


def test_release_retry_reruns_every_blocked_null_key_record() -> None:
    b = Bench(poison="block")
    b.admit([(0, None), (1, None)])
    for offset in (0, 1):
        b.dispatcher.block(b.state, b.take(offset), "boom")
    b.dispatcher.release(b.state, None, retry=True)
    assert b.dispatched() == [0, 1]


# -- item 6: one bad entry does not strand a settled batch ------------------------------------


def test_a_bad_entry_in_a_settled_batch_does_not_strand_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    b = Bench()
    b.admit([(0, b"a"), (1, b"b"), (2, b"a"), (3, b"b")])
    first_a, first_b = b.take(0), b.take(1)
    b.dispatcher.finish(b.state, first_a)
    b.take(2)  # a's next record, now in flight
    stale: Work = (b.state, first_a)  # settled twice: the window rejects it
    with caplog.at_level(logging.ERROR):
        b.dispatcher.finish_many([stale, (b.state, first_b)])
    assert 3 in b.dispatched(), "b's next record was stranded behind the bad entry"
    assert "t[0]@0" in caplog.text


# -- drains -------------------------------------------------------------------------------------


def test_draining_partition_gives_back_delivered_records_and_holds_the_cursor() -> None:
    b = Bench()
    b.admit([(0, b"a")])
    b.dispatcher.stop_dispatching([b.state])
    b.admit([(1, b"b"), (2, b"c")])
    assert b.dispatched() == [0]
    b.dispatcher.finish(b.state, b.take(0))
    assert b.state.window is not None
    b.state.window.observe_position(3)
    assert b.cursor == 1, "the cursor passed records delivered while draining"


def test_wait_drained_runs_the_tick_while_waiting() -> None:
    b = Bench()
    b.admit([(0, b"a")])
    entry = b.take(0)
    b.dispatcher.stop_dispatching([b.state])
    ticks = []

    def tick() -> None:
        ticks.append(1)
        b.dispatcher.finish(b.state, entry)  # what a flush of held successes does

    assert b.dispatcher.wait_drained([b.state], 5.0, tick=tick)
    assert ticks


# -- holds on dispatch (a coordinator lost its connection, or is not sure of its session) -------


def test_a_hold_starts_nothing_then_its_lift_hands_over_what_became_ready() -> None:
    b = Bench()
    b.dispatcher.take_hold("zookeeper-connection")
    b.admit([(0, b"a"), (1, b"b"), (2, b"a")])
    assert b.submitted == [], "a record started while dispatch was held"
    assert list(b.dispatcher.holds()) == ["zookeeper-connection"]
    assert b.dispatcher.lift_hold("zookeeper-connection")
    assert b.dispatched() == [0, 1]  # 2 waits behind 0, its key's predecessor
    assert b.dispatcher.holds() == {}


def test_dispatch_resumes_only_when_the_last_hold_is_lifted_and_only_by_its_name() -> None:
    b = Bench()
    b.dispatcher.take_hold("a")
    b.dispatcher.take_hold("b")
    b.admit([(0, b"x")])
    assert not b.dispatcher.lift_hold("c"), "a hold nobody took was lifted"
    assert b.dispatcher.lift_hold("a")
    assert b.submitted == [], "one owner's lift released another owner's hold"
    b.dispatcher.take_hold("b")  # taken twice: still one hold, lifted once
    assert b.dispatcher.lift_hold("b")
    assert b.dispatched() == [0]
    assert not b.dispatcher.lift_hold("b")


def test_records_held_by_a_hold_never_run_once_their_partition_drains() -> None:
    b = Bench()
    b.dispatcher.take_hold("zookeeper-connection")
    b.admit([(0, b"a"), (1, b"b")])
    b.dispatcher.stop_dispatching([b.state])
    assert b.dispatcher.wait_drained([b.state], 1.0), "held records counted as running"
    b.dispatcher.lift_hold("zookeeper-connection")
    assert b.submitted == []
    assert b.cursor == 0, "the cursor passed records that never ran"


def test_a_member_not_sure_of_its_session_starts_nothing_until_dispatch_resumes() -> None:
    """The liveness gate a coordinator sets: nothing starts while it says no, and what became
    ready meanwhile is handed over, in order, when dispatch resumes."""
    b = Bench()
    live = [False]
    b.dispatcher.set_liveness(lambda: live[0])
    b.admit([(0, b"a"), (1, b"b")])
    assert b.submitted == [], "a record started while the member was not live"
    assert list(b.dispatcher.holds()) == [LIVENESS_HOLD]
    live[0] = True
    b.dispatcher.lift_hold(LIVENESS_HOLD)
    assert b.dispatched() == [0, 1]


def test_a_deferred_record_stays_running_and_runs_after_resume() -> None:
    b = Bench()
    b.admit([(0, b"a")])
    entry = b.take(0)
    b.dispatcher.defer(b.state, entry)  # a worker found the member not live
    assert b.state.running == 1, "a deferred record must still hold its key and the drain"
    b.dispatcher.lift_hold(LIVENESS_HOLD)
    assert b.dispatched() == [0]


def test_a_record_deferred_after_its_partition_was_removed_is_abandoned() -> None:
    """A worker saw the partition active, then it was removed, then the worker found the
    member not live: the entry must not sit in the hold queue of a gone state."""
    b = Bench()
    b.admit([(0, b"a")])
    entry = b.take(0)
    b.dispatcher.remove([b.state])
    b.dispatcher.defer(b.state, entry)
    assert b.state.running == 0
    assert b.dispatcher.holds() == {}


def test_a_restart_after_a_rewind_drops_the_old_logs_outputs() -> None:
    """Issue 36 D10: records of the old log that finished while the rewind waited for them
    left their outputs ready; after the restart they went out in a transaction for the new
    log's offsets, after the same keys' new outputs (or stayed in memory for good when the new
    log was shorter). Their records are read again if the new log still has them."""
    b = Bench()
    b.admit([(0, b"a"), (1, b"b"), (2, b"c")])
    for offset in (0, 1, 2):
        entry = b.take(offset)
        b.state.outputs.stage(offset, [OutputMessage("out", b"k", b"old-%d" % offset, None)])
        b.dispatcher.finish(b.state, entry)
    assert [o for o, _ in b.state.outputs.ready] == [0, 1, 2]
    assert b.dispatcher.restart(b.state) == 3
    assert b.state.outputs.ready == [] and b.state.outputs.staged == {}


def test_a_release_with_retry_drops_the_dead_letter_staged_at_the_block() -> None:
    """Issue 36 D9: with ``block_and_dead_letter`` and exactly-once, the dead letter is staged
    at the block. A retry that then succeeded committed it beside the record's outputs, and a
    retry that blocked again staged a second letter for the same record."""
    b = Bench(poison="block_and_dead_letter")
    b.admit([(0, b"k")])

    def block_with_letter(text: bytes) -> None:
        entry = b.take(0)
        b.state.outputs.stage(0, [OutputMessage("dlq", b"k", text, None)])
        b.dispatcher.block(b.state, entry, "boom")

    block_with_letter(b"letter-1")
    assert b.dispatcher.release(b.state, b"k", retry=True) == "blocked"
    block_with_letter(b"letter-2")  # the retry fails again
    assert b.dispatcher.release(b.state, b"k", retry=False) == "blocked"
    assert [(o, [m.value for m in ms]) for o, ms in b.state.outputs.ready] == [(0, [b"letter-2"])]

    b.admit([(1, b"j")])
    entry = b.take(1)
    b.state.outputs.stage(1, [OutputMessage("dlq", b"j", b"letter", None)])
    b.dispatcher.block(b.state, entry, "boom")
    b.dispatcher.release(b.state, b"j", retry=True)
    b.state.outputs.stage(1, [OutputMessage("out", b"j", b"output", None)])  # succeeds now
    b.dispatcher.finish(b.state, b.take(1))
    assert [m.value for o, ms in b.state.outputs.ready if o == 1 for m in ms] == [b"output"]


# -- exactly-once outputs held for a commit are bounded ------------------------------------------


def _finish_with_output(b: Bench, offset: int, key: bytes, size: int) -> None:
    """Finish ``offset`` (admitting it first) with one output of ``size`` bytes."""
    if offset not in b.dispatched():
        b.admit([(offset, key)])
    entry = b.take(offset)
    b.state.outputs.stage(offset, [OutputMessage("out", None, b"x" * size, None)])
    b.dispatcher.finish(b.state, entry)


def _pressure(b: Bench, paused: set[tuple[str, int]]) -> tuple[list[Any], list[Any]]:
    """One backpressure step, applied to ``paused`` as the poll loop's does."""
    pause, resume = b.dispatcher.pressure({b.state.tp: b.state}, paused)
    paused.update(pause)
    paused.difference_update(resume)
    return pause, resume


def test_held_outputs_pause_fetching_at_the_budget_and_resume_under_half(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 36 D6: outputs of finished records waiting for a commit (a missing DLQ topic, no
    producer) were not counted by backpressure, which counts unfinished records only: they
    grew without limit while fetching went on."""
    b = Bench(max_held_output_bytes=100)
    paused: set[tuple[str, int]] = set()
    _finish_with_output(b, 0, b"a", 60)
    assert _pressure(b, paused) == ([], []) and b.dispatcher.held_output_bytes == 60
    with caplog.at_level(logging.INFO, logger="keyshared.runtime.dispatcher"):
        _finish_with_output(b, 1, b"b", 40)
        assert _pressure(b, paused) == ([b.state.tp], [])
        assert _pressure(b, paused) == ([], [])  # paused once
        _, taken = b.dispatcher.commit_snapshot([b.state], take_outputs=True)
        b.dispatcher.return_outputs([(b.state, taken[0][1][:1])])  # 60 bytes: half or more
        assert _pressure(b, paused) == ([], []) and b.dispatcher.held_output_bytes == 60
        _, taken = b.dispatcher.commit_snapshot([b.state], take_outputs=True)
        smaller = [(0, [OutputMessage("out", None, b"x" * 49, None)])]
        b.dispatcher.return_outputs([(b.state, smaller)])
        assert _pressure(b, paused) == ([], [b.state.tp]) and b.dispatcher.held_output_bytes == 49
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(warnings) == 1 and "100 bytes of outputs wait for a commit" in warnings[0].message
    assert len(infos) == 1 and "resumed" in infos[0].message


def test_a_window_paused_partition_is_not_resumed_by_the_held_outputs_rule() -> None:
    """Both rules pause the partition: the outputs going out does not resume it while its
    window is full, and its window draining does not resume it while the outputs are held."""
    b = Bench(max_window=2, max_held_output_bytes=100)
    paused: set[tuple[str, int]] = set()
    _finish_with_output(b, 0, b"a", 120)
    b.admit([(1, b"b"), (2, b"c")])  # two unfinished: the window is full
    assert _pressure(b, paused) == ([b.state.tp], [])
    b.dispatcher.commit_snapshot([b.state], take_outputs=True)  # the outputs went out
    assert _pressure(b, paused) == ([], []), "resumed with a full window"
    _finish_with_output(b, 1, b"b", 120)  # the window drains; outputs are held again
    assert _pressure(b, paused) == ([], []), "resumed while the outputs are over the budget"
    b.dispatcher.commit_snapshot([b.state], take_outputs=True)
    assert _pressure(b, paused) == ([], [b.state.tp])


def test_a_partition_without_held_outputs_keeps_fetching_over_the_budget() -> None:
    b = Bench(max_held_output_bytes=100)
    other = PartitionState("t", 1, b.state.metrics, committed=0)
    _finish_with_output(b, 0, b"a", 150)
    pause, _ = b.dispatcher.pressure({b.state.tp: b.state, other.tp: other}, set())
    assert pause == [b.state.tp]


class _PausingConsumer:
    def __init__(self) -> None:
        self.paused: set[tuple[str, int]] = set()

    def pause(self, tps: list[Any]) -> None:
        self.paused.update((tp.topic, tp.partition) for tp in tps)

    def resume(self, tps: list[Any]) -> None:
        self.paused.difference_update((tp.topic, tp.partition) for tp in tps)

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        return 0, 0


def test_the_poll_loops_backpressure_pauses_for_held_outputs_and_exports_their_bytes() -> None:
    b = Bench(max_held_output_bytes=100)
    metrics = ConsumerMetrics("g", f"m-{uuid.uuid4().hex[:8]}")
    consumer = _PausingConsumer()
    backpressure = Backpressure(consumer, metrics)  # type: ignore[arg-type]
    _finish_with_output(b, 0, b"a", 150)
    backpressure.apply({b.state.tp: b.state}, b.dispatcher)
    labels = {"group": "g", "member": metrics.member}
    assert REGISTRY.get_sample_value("keyshared_held_output_bytes", labels) == 150
    assert consumer.paused == {b.state.tp}
    b.dispatcher.commit_snapshot([b.state], take_outputs=True)
    backpressure.apply({b.state.tp: b.state}, b.dispatcher)
    assert REGISTRY.get_sample_value("keyshared_held_output_bytes", labels) == 0
    assert consumer.paused == set()
