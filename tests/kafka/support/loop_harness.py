"""A poll loop over a :class:`FakeConsumer` whose "workers" are the test itself.

Records the dispatcher hands out are collected in ``submitted`` instead of running on threads,
so a test decides exactly when each one finishes: the interleavings of a revoke, a shutdown
or a refused commit with in-flight work become deterministic.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from keyshared.kafka.poll_loop import PollLoop
from keyshared.kafka.seams import PollInbox
from keyshared.metrics import ConsumerMetrics
from keyshared.runtime.dispatcher import Dispatcher, Work
from keyshared.settings import ConsumerOptions
from tests.kafka.support.fake_consumer import FakeConsumer

__all__ = ["LoopHarness"]


@dataclass
class LoopHarness:
    options: ConsumerOptions = field(default_factory=ConsumerOptions)
    workers: int = 4
    nudge: Callable[[], None] = lambda: None
    fake: FakeConsumer = field(default_factory=FakeConsumer)
    stop: threading.Event = field(default_factory=threading.Event)
    submitted: list[Work] = field(default_factory=list)
    inbox: PollInbox | None = None
    topic_ids: Any = None  # a TopicIds look-alike: the poll loop's watch of the topics' ids

    def __post_init__(self) -> None:
        self.metrics = ConsumerMetrics(f"g-{uuid.uuid4().hex[:8]}", "m")
        self.dispatcher = Dispatcher(self.options, self.workers, self._submit)
        self.loop = PollLoop(
            self.fake,
            ["t"],
            self.options,
            self.dispatcher,
            self.metrics,
            None,
            self.stop,
            nudge_workers=lambda: self.nudge(),
            inbox=self.inbox,
            topic_ids=self.topic_ids,
        )
        self.fake.on_commit = self.loop.committer.on_commit

    def _submit(self, worker: int, works: list[Work]) -> None:
        self.submitted.extend(works)

    def take(self, offset: int, partition: int = 0) -> Work:
        """The submitted work for ``offset`` of ``t[partition]`` (removed from the list)."""
        for i, (state, entry) in enumerate(self.submitted):
            if entry.offset == offset and state.partition == partition:
                return self.submitted.pop(i)
        raise AssertionError(f"t[{partition}]@{offset} was not dispatched: {self.offsets()}")

    def finish(self, offset: int, partition: int = 0) -> None:
        """The handler of ``t[partition]@offset`` succeeded."""
        state, entry = self.take(offset, partition)
        self.dispatcher.finish(state, entry)

    def offsets(self) -> list[tuple[int, int]]:
        return [(s.partition, e.offset) for s, e in self.submitted]

    def run(self, timeout: float = 30.0) -> None:
        """Run the loop on a thread until it returns (after stop); fail if it does not."""
        errors: list[BaseException] = []

        def target() -> None:
            try:
                self.loop.run()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=target, name="test-poll-loop", daemon=True)
        thread.start()
        thread.join(timeout)
        assert not thread.is_alive(), "the poll loop did not return after stop"
        self.metrics.close()
        if errors:
            raise errors[0]

    def committed(self, partition: int = 0) -> int | None:
        last = self.fake.last_commit_of(("t", partition))
        return None if last is None else last[0]

    def state_of(self, partition: int = 0) -> Any:
        return self.loop.states.get(("t", partition))
