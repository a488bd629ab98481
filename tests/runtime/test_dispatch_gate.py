"""The dispatcher's per-key hold, without threads or a broker (issue 24, defect 5).

A partition is removed (fenced) while a call of key ``k`` still runs. The partition is assigned
again: the new window's record of ``k`` waits for the fenced call; other keys start at once; the
record starts when the call ends, and a draining partition's waiting records never start. These
pass only with the hold wired (before it, the new window started ``k`` at once).
"""

from __future__ import annotations

import uuid
from typing import Any

from coordinator.modes.key_shared_stragglers import FencedKeys
from keyshared.core.window import Entry
from keyshared.metrics import ConsumerMetrics
from keyshared.runtime.dispatcher import Dispatcher, Work
from keyshared.runtime.partition import PartitionState
from keyshared.settings import ConsumerOptions
from tests.kafka.support.fake_consumer import records


class Bench:
    def __init__(self) -> None:
        self.submitted: list[Work] = []
        self.dispatcher = Dispatcher(
            ConsumerOptions(), 4, lambda _w, works: self.submitted.extend(works)
        )
        self.dispatcher.use_hold(FencedKeys())
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
