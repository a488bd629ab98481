"""Pull-style consumption: the application takes records and acks or nacks each one.

The window and the poison machinery are the same as for handlers; only the "worker" differs:
released records wait in a queue for the application, and an ack timeout stands in for a
handler that never returns. A record past its ack timeout counts as failed (and is retried or
dead-lettered as the policy says), so its key is never stuck behind a forgotten record.
"""

from __future__ import annotations

import functools
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from keyshared.record import Record
from keyshared.runtime.outputs import output_of

if TYPE_CHECKING:
    from keyshared.runtime.dispatcher import Work
    from keyshared.runtime.execution import RecordExecutor
    from keyshared.runtime.outputs import Output

__all__ = ["AckTimeoutError", "PullQueue"]

RecordId = tuple[str, int, int]


class AckTimeoutError(TimeoutError):
    """A pulled record was neither acked nor nacked within ``ack_timeout``."""


class PullQueue:
    """Stands where the worker pool would, and hands records to ``get`` callers instead."""

    def __init__(
        self,
        count: int,
        ack_timeout: float,
        call_later: Callable[[float, Callable[[], None]], None],
    ) -> None:
        self.count = count
        self.executor: RecordExecutor | None = None
        self._ack_timeout = ack_timeout
        self._call_later = call_later
        self._ready: queue.SimpleQueue[Work] = queue.SimpleQueue()
        # record id -> (work, token, pulled at, its record.output: sealed when it settles)
        self._outstanding: dict[RecordId, tuple[Work, int, float, Output | None]] = {}
        self._tokens = itertools.count()
        self._lock = threading.Lock()

    def bind(self, executor: RecordExecutor) -> None:
        self.executor = executor

    def nudge(self) -> None:
        """Nothing to do: the application pulls."""

    def on_draining(self, states: list[Any]) -> None:
        self.purge(states)

    def submit(self, worker: int, works: list[Work]) -> None:
        for work in works:
            self._ready.put(work)

    def depth(self, worker: int) -> int:
        return self._ready.qsize()

    def get(self, timeout: float | None) -> Record | None:
        """The next record whose key is free, or None after ``timeout`` seconds."""
        assert self.executor is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                work = self._ready.get(timeout=remaining)
            except queue.Empty:
                return None
            state, entry = work
            record = self.executor.prepare(state, entry)
            if record is None:
                continue
            rid = (record.topic, record.partition, record.offset)
            token = next(self._tokens)
            with self._lock:
                output = None if record.output is None else output_of(record)
                self._outstanding[rid] = (work, token, time.perf_counter(), output)
            self._call_later(self._ack_timeout, functools.partial(self._expire, rid, token))
            return record

    def _take(self, rid: RecordId, token: int | None = None) -> tuple[Work, float] | None:
        """Settle a pulled record once: its ``record.output`` is sealed (a produce after its
        ack, nack or ack timeout raises instead of being committed or lost by timing)."""
        with self._lock:
            held = self._outstanding.get(rid)
            if held is None or (token is not None and held[1] != token):
                return None
            del self._outstanding[rid]
        if held[3] is not None:
            held[3].sealed = True
        return held[0], held[2]

    def ack(self, record: Record) -> bool:
        """Mark ``record`` processed; False if it was not outstanding (already settled)."""
        taken = self._take((record.topic, record.partition, record.offset))
        if taken is None:
            return False
        (state, entry), started = taken
        assert self.executor is not None
        if record.output is not None:  # exactly-once; sealed by _take, staged as a copy
            state.outputs.stage_attempt(entry.offset, output_of(record))
        self.executor.succeeded(state, entry, time.perf_counter() - started)
        return True

    def nack(self, record: Record, error: BaseException) -> bool:
        """Mark ``record`` failed: retried with backoff, then the poison policy applies."""
        taken = self._take((record.topic, record.partition, record.offset))
        if taken is None:
            return False
        (state, entry), _ = taken
        assert self.executor is not None
        self.executor.failed(state, entry, error)
        return True

    def _expire(self, rid: RecordId, token: int) -> None:
        taken = self._take(rid, token)
        if taken is not None:
            (state, entry), _ = taken
            assert self.executor is not None
            error = AckTimeoutError(f"not acked within {self._ack_timeout:g}s")
            self.executor.failed(state, entry, error)

    def purge(self, states: list[Any]) -> None:
        """Give back queued, never-pulled records of partitions that are being revoked."""
        assert self.executor is not None
        keep: list[Work] = []
        while True:
            try:
                work = self._ready.get_nowait()
            except queue.Empty:
                break
            if work[0] in states:
                self.executor.prepare(*work)  # not active any more: abandons it
            else:
                keep.append(work)
        for work in keep:
            self._ready.put(work)

    def close(self, timeout: float = 0.0) -> None:
        """Nothing runs here; outstanding records are settled by the partition drain."""
