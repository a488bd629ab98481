"""Batch handlers: one handler call for several records that may all run now.

Why batches: a handler that writes to a database pays a round trip and a commit per call;
handed fifty records at once it pays them once (``executemany`` in one transaction). Per-key
order needs nothing new for that: a worker only ever holds records the window has released,
and the window releases a key's next record only after the previous one finished, so a batch
never holds two records of one ordered key, and the records of a batch may run in any order
(unordered null-key records, which have no order to keep, may share a batch).

Outcomes, decided per record by :func:`keyshared.core.batches.batch_failures`: a handler that
returns finishes every record; one that raises :class:`keyshared.BatchError` fails only the
records it names; any other exception fails them all. A failed record then follows the retry
and poison policy on its own, through the same code a single-record failure takes
(:meth:`RecordExecutor.failed`), and comes back later in some other batch.

Records are built and checked by :meth:`RecordExecutor.prepare`, as for single records: a
record of a revoked partition, a deferred one, a parked key's tail or one that does not
deserialize is settled there and never reaches the handler.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from keyshared.core.batches import batch_failures
from keyshared.errors import BatchError
from keyshared.record import Record
from keyshared.runtime.outputs import output_of
from keyshared.runtime.settlement import Success

if TYPE_CHECKING:
    from keyshared.runtime.dispatcher import Work
    from keyshared.runtime.execution import RecordExecutor

__all__ = ["BatchExecutor", "BatchHandler"]

BatchHandler = Callable[[list[Record]], Any]


class BatchExecutor:
    """Runs batches of entries through a batch handler; one instance serves every worker.

    :param executor: builds each record and carries out each failure (retry, poison policy).
    :param handler: takes a ``list[Record]``; plain for :meth:`run`, ``async def`` for
        :meth:`run_async`.
    """

    def __init__(self, executor: RecordExecutor, handler: BatchHandler) -> None:
        self._executor = executor
        self._handler = handler

    def run(self, works: list[Work]) -> None:
        """Run one batch on a worker thread; its successes are settled at once, together."""
        ready, records = self._prepare(works)
        if not records:
            return
        started = time.perf_counter()
        try:
            self._handler(records)
        except BaseException as exc:
            self._settle(ready, records, exc, time.perf_counter() - started, self._settle_now)
            return
        self._settle(ready, records, None, time.perf_counter() - started, self._settle_now)

    async def run_async(self, works: list[Work]) -> None:
        """Run one batch on the event loop; its successes join the loop's settlement burst."""
        ready, records = self._prepare(works)
        if not records:
            return
        started = time.perf_counter()
        try:
            await self._handler(records)
        except BaseException as exc:
            self._settle(ready, records, exc, time.perf_counter() - started, self._settle_on_loop)
            return
        self._settle(ready, records, None, time.perf_counter() - started, self._settle_on_loop)

    def _prepare(self, works: list[Work]) -> tuple[list[Work], list[Record]]:
        ready: list[Work] = []
        records: list[Record] = []
        prepare = self._executor.prepare
        for state, entry in works:
            record = prepare(state, entry)
            if record is not None:
                ready.append((state, entry))
                records.append(record)
        return ready, records

    def _settle(
        self,
        ready: list[Work],
        records: list[Record],
        error: BaseException | None,
        elapsed: float,
        succeed: Callable[[list[Success]], None],
    ) -> None:
        """Successes first (their keys' next records can start), then each failure on its own.

        Each record's handler time is its share of the call, so the sum over records is the
        time handlers really took and ``keyshared_handler_duration_seconds`` stays additive.
        """
        named = error.failures if isinstance(error, BatchError) else None
        failures = batch_failures(len(ready), error, named)
        share = elapsed / len(ready)
        if failures:
            successes = [
                (state, entry, share)
                for index, (state, entry) in enumerate(ready)
                if index not in failures
            ]
        else:  # the usual case: no index test per record
            successes = [(state, entry, share) for state, entry in ready]
        if records[0].output is not None:  # exactly-once (every record has one, or none)
            for index, (state, entry) in enumerate(ready):  # the outputs of successes
                if records[index].output is not None:
                    output = output_of(records[index])
                    if index in failures:
                        output.seal()
                    else:
                        state.outputs.stage_attempt(entry.offset, output)
        if successes:
            succeed(successes)
        failed = self._executor.failed
        for index, exc in failures.items():
            state, entry = ready[index]
            failed(state, entry, exc)

    def _settle_now(self, successes: list[Success]) -> None:
        self._executor.settlements.settle_now(successes)

    def _settle_on_loop(self, successes: list[Success]) -> None:
        add = self._executor.loop_settlements.add
        for state, entry, elapsed in successes:
            add(state, entry, elapsed)
