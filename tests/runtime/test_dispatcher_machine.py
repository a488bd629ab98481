"""A hypothesis state machine over the ``Dispatcher``, checked against a model.

The machine plays the poll thread (admit, revoke, lose, drain) and the workers (succeed, fail
into a retry, block, park, release) in any interleaving, with offset gaps and null keys. After
every step:

- never two records of an ordered key are owned by workers at once, and a key's records are
  dispatched in offset order;
- the safe cursor never passes a record that is not finished;
- the dispatcher's count of running entries matches what the workers hold plus the records
  waiting out a retry backoff (they keep their key busy and their window in place), until the
  partition stops dispatching and withdraws them.

At the end every admitted record was finished exactly once, or (after a revoke or a loss) is
at or above the cursor, so the next owner gets it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from keyshared.core.window import Entry
from keyshared.metrics import ConsumerMetrics
from keyshared.runtime.dispatcher import Dispatcher, Work
from keyshared.runtime.partition import PartitionPhase, PartitionState
from keyshared.settings import ConsumerOptions
from tests.kafka.support.fake_consumer import FakeMessage

KEYS = [b"a", b"b", b"c", None]


class DispatcherMachine(RuleBasedStateMachine):
    @initialize(
        null_ordered=st.booleans(),
        capacity=st.integers(1, 3),
        workers=st.integers(1, 3),
    )
    def setup(self, null_ordered: bool, capacity: int, workers: int) -> None:
        options = ConsumerOptions(
            workers=workers, per_worker_capacity=capacity, null_keys_ordered=null_ordered
        )
        self.null_ordered = null_ordered
        self.submitted: list[Work] = []  # handed to a worker, not yet picked up
        self.dispatcher = Dispatcher(options, workers, self._submit)
        self.metrics = ConsumerMetrics(f"g-{uuid.uuid4().hex[:8]}", "m")
        self.state = PartitionState("t", 0, self.metrics.partition("t", 0), committed=0)
        self.next_offset = 0
        self.keys: dict[int, bytes | None] = {}  # every admitted offset -> key
        self.finished: dict[int, int] = {}  # offset -> times finished
        self.given_back: set[int] = set()  # delivered after the partition stopped
        self.running: list[Work] = []  # picked up by a worker
        self.backing_off: dict[int, Work] = {}  # by entry id: waiting out a backoff
        self._retried = 0  # the entry whose backoff the next timer ends
        self.timers: list[Callable[[], None]] = []
        self.blocked: set[int] = set()
        self.ended = False  # revoked or lost

    def _submit(self, worker: int, works: list[Work]) -> None:
        for _, entry in works:
            key = self.keys[entry.offset]
            if self._ordered(key):
                earlier = [o for o, k in self.keys.items() if k == key and o < entry.offset]
                unfinished = [o for o in earlier if o not in self.finished]
                assert not unfinished, f"{entry.offset} of {key!r} dispatched before {unfinished}"
        self.submitted.extend(works)

    def _ordered(self, key: bytes | None) -> bool:
        return key is not None or self.null_ordered

    def _call_later(self, delay: float, action: Callable[[], None]) -> None:
        retried = self._retried

        def elapse() -> None:
            self.backing_off.pop(retried, None)
            action()

        self.timers.append(elapse)

    # -- the poll thread ---------------------------------------------------------------------

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=6), gap=st.integers(0, 2))
    def admit(self, keys: list[bytes | None], gap: int) -> None:
        batch = []
        self.next_offset += gap  # offsets never delivered (markers, compaction)
        for key in keys:
            offset = self.next_offset
            self.next_offset += 1
            self.keys[offset] = key
            if self.ended:
                self.given_back.add(offset)
            batch.append(FakeMessage("t", 0, offset, key))
        self.dispatcher.admit(self.state, batch)

    @precondition(lambda self: not self.ended)
    @rule(lose=st.booleans())
    def revoke_or_lose(self, lose: bool) -> None:
        self.ended = True
        self.backing_off.clear()  # withdrawn: they never run again here
        if lose:
            self.dispatcher.remove([self.state])
        else:
            self.dispatcher.stop_dispatching([self.state])

    # -- the workers ---------------------------------------------------------------------------

    @precondition(lambda self: self.submitted)
    @rule(i=st.integers(0, 100))
    def pick_up(self, i: int) -> None:
        work = self.submitted.pop(i % len(self.submitted))
        if work[0].phase is not PartitionPhase.ACTIVE:
            self.dispatcher.abandon(work[0])  # what RecordExecutor.prepare does
            return
        self.running.append(work)

    def _take_running(self, i: int) -> tuple[PartitionState, Entry[Any]]:
        return self.running.pop(i % len(self.running))

    @precondition(lambda self: self.running)
    @rule(i=st.integers(0, 100))
    def succeed(self, i: int) -> None:
        state, entry = self._take_running(i)
        self._count_finish(state, entry)
        self.dispatcher.finish(state, entry)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def succeed_many(self, data: st.DataObject) -> None:
        """A settlement buffer's batch: several successes, in the order their thread ran them,
        handed over as they are (state, entry, handler seconds) under one lock acquisition."""
        picks = data.draw(
            st.lists(st.integers(0, len(self.running) - 1), min_size=1, unique=True),
            label="succeed many",
        )
        works = [self.running[i] for i in picks]
        for i in sorted(picks, reverse=True):
            self.running.pop(i)
        for state, entry in works:
            self._count_finish(state, entry)
        assert self.dispatcher.finish_many([(state, entry, 0.001) for state, entry in works])

    def _count_finish(self, state: PartitionState, entry: Entry[Any]) -> None:
        if state.phase is not PartitionPhase.GONE:  # a gone state's results are discarded
            self.finished[entry.offset] = self.finished.get(entry.offset, 0) + 1

    @precondition(lambda self: self.running)
    @rule(i=st.integers(0, 100))
    def fail_and_retry(self, i: int) -> None:
        state, entry = self._take_running(i)
        self._retried = id(entry)
        if state.phase is PartitionPhase.ACTIVE:
            self.backing_off[id(entry)] = (state, entry)
        self.dispatcher.retry_later(state, entry, 0.1, self._call_later)

    @precondition(lambda self: self.timers)
    @rule()
    def backoff_elapses(self) -> None:
        self.timers.pop(0)()

    @precondition(lambda self: self.running)
    @rule(i=st.integers(0, 100))
    def block(self, i: int) -> None:
        state, entry = self._take_running(i)
        self.blocked.add(entry.offset)
        self.dispatcher.block(state, entry, "boom")

    @precondition(lambda self: self.running)
    @rule(i=st.integers(0, 100))
    def park(self, i: int) -> None:
        """Dead-lettered and parked: its key's later records will follow it (execution.py)."""
        state, entry = self._take_running(i)
        if entry.ordered:
            self._count_finish(state, entry)
            self.dispatcher.park(state, entry)
            return
        self._count_finish(state, entry)
        self.dispatcher.finish(state, entry)

    @precondition(lambda self: self.blocked)
    @rule(retry=st.booleans(), i=st.integers(0, 100))
    def release(self, retry: bool, i: int) -> None:
        offset = sorted(self.blocked)[i % len(self.blocked)]
        key = self.keys[offset]
        released = [o for o in self.blocked if self.keys[o] == key]
        if self.state.phase is PartitionPhase.ACTIVE and not retry:  # skipped: done from now on
            for o in released:
                self.finished[o] = self.finished.get(o, 0) + 1
        self.blocked.difference_update(released)
        assert self.dispatcher.release(self.state, key, retry=retry) == "blocked"

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def one_owned_record_per_ordered_key(self) -> None:
        owned = [e for _, e in self.submitted + self.running + list(self.backing_off.values())]
        owned += [self._entry_of(o) for o in self.blocked]
        keys = [e.key for e in owned if e is not None and e.ordered]
        assert len(keys) == len(set(keys)), f"two records of a key owned at once: {keys}"

    def _entry_of(self, offset: int) -> Entry[Any] | None:
        window = self.state.window
        return window.get(offset) if window is not None else None

    @invariant()
    def cursor_never_passes_an_unfinished_record(self) -> None:
        window = self.state.window
        if window is None:
            return
        unfinished = [o for o in self.keys if o not in self.finished]
        if unfinished:
            assert window.safe_cursor <= min(unfinished), (window.safe_cursor, min(unfinished))

    @invariant()
    def nothing_finished_twice(self) -> None:
        twice = [o for o, n in self.finished.items() if n > 1]
        assert not twice, f"finished more than once: {twice}"

    @invariant()
    def running_count_matches(self) -> None:
        if self.state.phase is PartitionPhase.GONE:
            return
        owned = len(self.submitted) + len(self.running) + len(self.backing_off)
        assert self.state.running == owned, (self.state.running, owned)

    def teardown(self) -> None:
        if not hasattr(self, "state"):
            return
        # Thousands of examples: their series would bloat the process-wide registry (and slow
        # every later /metrics scrape in this test session).
        self.metrics.close()
        if not self.ended:
            # Everything admitted to a live partition finishes: release blocks, run the rest.
            for _ in range(10_000):
                if self.timers:
                    self.timers.pop(0)()
                elif self.blocked:
                    self.release(False, 0)
                elif self.submitted:
                    self.pick_up(0)
                elif self.running:
                    self.succeed(0)
                else:
                    break
            assert set(self.finished) == set(self.keys), set(self.keys) - set(self.finished)
            window = self.state.window
            assert window is None or window.safe_cursor == self.next_offset
        else:
            window = self.state.window
            cursor = window.safe_cursor if window is not None else 0
            for offset in self.keys:
                assert offset in self.finished or offset >= cursor, (offset, cursor)
            assert all(o >= cursor for o in self.given_back), "passed a given-back record"


TestDispatcherMachine = DispatcherMachine.TestCase
TestDispatcherMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
