"""Finding 18 of the chaos runs (docs/chaos.md), reduced to one worker without threads: a
member stopped (SIGSTOP, a long GC pause) after its worker passed the liveness check and before
it called the handler runs the handler on waking, although it is no longer live.

The topology run saw it as a start journaled 6 ms after the SIGCONT, 70 ms before the member
learned that its session had expired. The stall is simulated by the key deserializer, which
runs in exactly that window (after ``RecordExecutor.prepare``'s check, before the handler).
Fixed in ``keyshared/runtime/execution.py``: liveness is checked again right before the handler
is called (the window shrinks to the call itself; fencing tokens cover the rest). This test
failed before the fix (it was an xfail(strict=True) until then). What is left of the window
(a stop between that check and the call) the chaos judge reports as a call decided before the
stop: the thread's first journal line after it (``tests/chaos/analysis.py``).
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from keyshared.runtime.execution import RecordExecutor
from tests.runtime.test_dispatcher import Bench


def test_a_member_that_stopped_being_live_after_the_check_does_not_start_the_handler() -> None:
    live = [True]

    def stalls_here(data: bytes | None) -> Any:
        live[0] = False  # SIGSTOP lands here; on SIGCONT the session is gone
        return data

    b = Bench()
    b.dispatcher.set_liveness(lambda: live[0])
    b.admit([(0, b"a")])
    started: list[Any] = []
    executor = RecordExecutor(
        b.options,
        started.append,
        b.dispatcher,
        lambda _s, _f: None,
        mock.Mock(),
        None,
        decode_key=lambda data, _msg: stalls_here(data),
    )
    executor.run((b.state, b.take(0)))
    assert started == [], "the handler started although the member was no longer live"
