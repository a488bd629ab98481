"""Which runner executes the handler: chosen once, from the handler's style and the options.

A thread pool for plain handlers, one event loop for ``async def``, batch pools for batch
handlers, or the pull queue when the application takes records itself (``handler=None``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

from keyshared.record import Record
from keyshared.runtime.batch_workers import BatchAsyncRunner, BatchThreadWorkers
from keyshared.runtime.batches import BatchHandler
from keyshared.runtime.control import Work
from keyshared.runtime.execution import RecordExecutor
from keyshared.runtime.partition import PartitionState
from keyshared.runtime.pull import PullQueue
from keyshared.runtime.workers import AsyncRunner, ThreadWorkers
from keyshared.settings import ConsumerOptions

__all__ = ["Runner", "make_runner"]


class Runner(Protocol):
    """Where handlers run. ``submit`` is called under the dispatcher's lock: it must not block.

    The runner is built before the executor that runs records (the executor needs the
    dispatcher, which needs ``submit``), so the executor arrives through :meth:`bind`.
    """

    @property
    def count(self) -> int: ...

    def bind(self, executor: RecordExecutor) -> None: ...

    def submit(self, worker: int, works: list[Work]) -> None: ...

    def depth(self, worker: int) -> int: ...

    def on_draining(self, states: list[PartitionState]) -> None:
        """Partitions stopped dispatching: drop what is queued for them and not started."""

    def nudge(self) -> None:
        """Periodic care from the poll thread (threads: take over queues of stuck ones)."""

    def close(self) -> None: ...


def make_runner(
    options: ConsumerOptions,
    handler: Callable[[Record], Any] | BatchHandler | None,
    is_async: bool,
    call_later: Callable[[float, Callable[[], None]], None],
) -> Runner:
    if handler is None:
        return PullQueue(options.workers, options.ack_timeout, call_later)
    if options.batch_size is not None:
        batched = BatchAsyncRunner if is_async else BatchThreadWorkers
        batch_handler = cast(BatchHandler, handler)  # batch_size says it takes lists
        return batched(options.workers, batch_handler, options.batch_size, options.batch_linger)
    if is_async:
        return AsyncRunner(options.workers)
    return ThreadWorkers(options.workers)
