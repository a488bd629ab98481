"""Which runner executes the handler: chosen once, from the handler's style and the options.

A thread pool for plain handlers, one event loop for ``async def``, batch pools for batch
handlers, or the pull queue when the application takes records itself (``handler=None``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from keyshared.kafka.batch_workers import BatchAsyncRunner, BatchThreadWorkers
from keyshared.kafka.batches import BatchHandler
from keyshared.kafka.pull import PullQueue
from keyshared.kafka.seams import Runner
from keyshared.kafka.workers import AsyncRunner, ThreadWorkers
from keyshared.record import Record
from keyshared.settings import ConsumerOptions

__all__ = ["make_runner"]


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
