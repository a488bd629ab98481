"""The dispatcher's per-key hold on removed states' running calls, without threads or a broker.

A partition is removed (fenced) while a call of key ``k`` still runs. The partition is assigned
again: the new window's record of ``k`` waits for the fenced call; other keys start at once; the
record starts when the call ends, and a draining partition's waiting records never start. The
hold is on in every mode: a key_shared fence, an exactly-once redo and a timed-out drain all
remove a state whose calls may still run.
"""

from __future__ import annotations

import uuid
from typing import Any

from keyshared.core.modes import Mode
from keyshared.core.window import Entry
from keyshared.metrics import ConsumerMetrics
from keyshared.runtime.dispatcher import Dispatcher, Work
from keyshared.runtime.partition import PartitionState
from keyshared.settings import ConsumerOptions
from tests.kafka.support.fake_consumer import records


class Bench:
    def __init__(self, options: ConsumerOptions | None = None) -> None:
        self.submitted: list[Work] = []
        self.dispatcher = Dispatcher(
            options or ConsumerOptions(), 4, lambda _w, works: self.submitted.extend(works)
        )
        self.metrics = ConsumerMetrics(f"g-{uuid.uuid4().hex[:8]}", "m")

    def state(self) -> PartitionState:
        return PartitionState("t", 0, self.metrics.partition("t", 0), committed=0)

    def take(self, state: PartitionState, offset: int) -> Entry[Any]:
        for i, (owner, entry) in enumerate(self.submitted):
            if owner is state and entry.offset == offset:
                return self.submitted.pop(i)[1]
        raise AssertionError(f"offset {offset} not dispatched")

    def started(self, state: PartitionState) -> list[int]:
        return sorted(e.offset for s, e in self.submitted if s is state)


def test_a_key_waits_for_its_fenced_call_and_the_other_keys_do_not() -> None:
    b = Bench()
    old = b.state()
    b.dispatcher.admit(old, records("t", 0, [(0, b"k"), (1, b"j")]))
    running = b.take(old, 0)  # k's call runs on; j's is still queued for a worker
    b.dispatcher.remove([old])  # the session expired
    queued = b.take(old, 1)

    new = b.state()
    b.dispatcher.admit(new, records("t", 0, [(0, b"k"), (1, b"j"), (2, b"x")]))
    # j's record still sits in a worker's queue (it counts as running until the worker finds
    # it fenced), so j waits too; x starts at once.
    assert b.started(new) == [2], "k or j started beside a call of theirs, or x waited"
    assert new.running == 3, "the waiting records stopped counting as running"

    b.dispatcher.abandon(old, queued)  # the worker finds j's queued record fenced
    assert b.started(new) == [1, 2]
    b.dispatcher.finish(old, running)  # k's fenced call returns
    assert b.started(new) == [0, 1, 2], "k did not start once its fenced call ended"


def test_a_draining_partition_drops_its_waiting_records() -> None:
    b = Bench()
    old = b.state()
    b.dispatcher.admit(old, records("t", 0, [(0, b"k")]))
    running = b.take(old, 0)
    b.dispatcher.remove([old])
    new = b.state()
    b.dispatcher.admit(new, records("t", 0, [(0, b"k")]))
    assert new.running == 1 and b.started(new) == []

    b.dispatcher.stop_dispatching([new])  # a re-read: the new window drains
    assert new.running == 0, "a waiting record kept its draining partition busy"
    b.dispatcher.finish(old, running)
    assert b.started(new) == [], "a record of a draining partition started"


def test_a_fenced_partition_without_running_calls_holds_nothing() -> None:
    b = Bench()
    old = b.state()
    b.dispatcher.admit(old, records("t", 0, [(0, b"k")]))
    b.dispatcher.finish(old, b.take(old, 0))
    b.dispatcher.remove([old])
    new = b.state()
    b.dispatcher.admit(new, records("t", 0, [(0, b"k")]))
    assert b.started(new) == [0]


def test_exclusive_mode_s_lane_waits_for_a_call_of_the_state_a_redo_replaced() -> None:
    """``exclusive`` runs one record of a partition at a time: after a redo replaced the state
    while a call ran, no record of the new state starts until that call ends."""
    b = Bench(ConsumerOptions(mode=Mode.EXCLUSIVE))
    old = b.state()
    b.dispatcher.admit(old, records("t", 0, [(0, b"k"), (1, b"j")]))
    running = b.take(old, 0)
    b.dispatcher.remove([old])  # the redo drops the state...
    new = b.state()  # ...and builds it again from the committed offset
    b.dispatcher.admit(new, records("t", 0, [(0, b"k"), (1, b"j")]))
    assert b.started(new) == [], "the serial lane ran two records at once"
    b.dispatcher.finish(old, running)
    assert b.started(new) == [0]


def test_a_removed_state_with_a_call_running_is_a_straggler_of_its_partition_until_it_ends() -> (
    None
):
    """What a mode's hand-back waits for besides the state it knows (a redo replaced it)."""
    b = Bench()
    old = b.state()
    b.dispatcher.admit(old, records("t", 0, [(0, b"k"), (1, b"j")]))
    running = b.take(old, 0)
    finished = b.take(old, 1)
    b.dispatcher.finish(old, finished)
    b.dispatcher.remove([old])
    assert b.dispatcher.stragglers([("t", 0)]) == [old]
    assert b.dispatcher.stragglers([("t", 1)]) == []
    b.dispatcher.finish(old, running)
    assert b.dispatcher.stragglers([("t", 0)]) == []


# -- only calls that really run hold their keys -----------------------------------------------


def test_a_record_withdrawn_from_its_backoff_does_not_hold_its_key() -> None:
    """k waits out a backoff, the revoke withdraws it, j's call outlives the drain: only j's
    key waits in the next state, not k behind j's unrelated call."""
    b = Bench()
    old = b.state()
    b.dispatcher.admit(old, records("t", 0, [(0, b"k"), (1, b"j")]))
    k, _j = b.take(old, 0), b.take(old, 1)
    b.dispatcher.retry_later(old, k, 1.0, lambda _delay, _fire: None)
    b.dispatcher.stop_dispatching([old])
    b.dispatcher.remove([old])  # the drain timed out: j still runs
    new = b.state()
    b.dispatcher.admit(new, records("t", 0, [(0, b"k"), (1, b"j"), (2, b"x")]))
    assert b.started(new) == [0, 2]


def test_a_successor_released_while_draining_does_not_hold_its_key() -> None:
    b = Bench()
    old = b.state()
    b.dispatcher.admit(old, records("t", 0, [(0, b"k"), (1, b"k"), (2, b"j")]))
    k0, _j = b.take(old, 0), b.take(old, 2)
    b.dispatcher.stop_dispatching([old])
    b.dispatcher.finish(old, k0)  # releases k@1 in the window; a draining state starts nothing
    b.dispatcher.remove([old])
    new = b.state()
    b.dispatcher.admit(new, records("t", 0, [(1, b"k"), (3, b"x")]))
    assert b.started(new) == [1, 3]


def test_a_record_that_waited_for_a_fenced_call_is_no_straggler_of_its_own_state() -> None:
    b = Bench()
    first = b.state()
    b.dispatcher.admit(first, records("t", 0, [(0, b"k")]))
    k1 = b.take(first, 0)
    b.dispatcher.remove([first])  # k's call runs on
    second = b.state()
    b.dispatcher.admit(second, records("t", 0, [(0, b"k"), (1, b"j")]))
    b.take(second, 1)  # j runs; k waits for first's call
    b.dispatcher.remove([second])  # removed again while j runs
    b.dispatcher.finish(first, k1)
    third = b.state()
    b.dispatcher.admit(third, records("t", 0, [(0, b"k"), (2, b"x")]))
    assert b.started(third) == [0, 2], "k waited for j's call"
