"""``SessionGate`` under three threads: the session watcher, the liveness prober, the poll thread.

Broker-less: a fake coordinator and dispatcher. The race (issue 24): the prober saw the flags
clear and was about to reopen dispatch when the session watcher flagged the session LOST and
paused dispatch; the prober then reopened it, and workers started records of work the member
no longer held, until the poll thread handled the loss. The prober's check and its reopening
must be one step with respect to the watcher's flag and pause.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from coordinator.modes import session_gate
from coordinator.modes.session_gate import SessionGate
from coordinator.session import SessionEvent, SessionState


class FakeDispatcher:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.paused = False

    def set_liveness(self, live: Any) -> None:
        pass

    def pause_dispatch(self) -> None:
        with self.lock:
            self.paused = True

    def resume_dispatch(self) -> None:
        with self.lock:
            self.paused = False


class FakeInbox:
    def __init__(self) -> None:
        self.posted: list[Any] = []

    def post(self, fn: Any) -> None:
        self.posted.append(fn)


class FakeClient:
    def exists(self, _path: str) -> bool:
        return True


class FakeZk:
    session_timeout = 10.0
    client = FakeClient()


class FakeContext:
    group = "g"
    member_id = "m"

    def __init__(self) -> None:
        self.dispatcher = FakeDispatcher()
        self.inbox = FakeInbox()


class OneProbe:
    """Stands in for the prober's stop event: one round, then stop."""

    def __init__(self) -> None:
        self.rounds = 0

    def wait(self, _timeout: float) -> bool:
        self.rounds += 1
        return self.rounds > 1

    def set(self) -> None:
        pass


def _gate() -> tuple[SessionGate, FakeContext]:
    context = FakeContext()
    gate = SessionGate(FakeZk(), context, on_lost=lambda: None, on_renewed=lambda: None)  # type: ignore[arg-type]
    gate._alive_until = 0.0  # a stall: the next proof reopens dispatch
    return gate, context


def _lost() -> SessionEvent:
    return SessionEvent(SessionState.LOST, 1)


def test_a_loss_flagged_while_the_prober_reopens_dispatch_leaves_dispatch_paused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Deterministic interleaving: the session watcher delivers LOST exactly between the
    prober's check of the flags and its reopening (the prober's log line of that moment is
    where the watcher is let in). Before the fix the prober reopened dispatch after the loss."""
    gate, context = _gate()
    watcher_done = threading.Event()

    class InterleavingLog:
        def info(self, *_args: Any) -> None:
            # The prober decided to reopen; let the watcher run now, on its own thread, and
            # give it time to finish (a gate that serialises the two keeps it waiting).
            def watcher() -> None:
                gate._on_event(_lost())
                watcher_done.set()

            threading.Thread(target=watcher).start()
            watcher_done.wait(0.5)

        def __getattr__(self, name: str) -> Any:
            return getattr(logging.getLogger("test"), name)

    monkeypatch.setattr(session_gate, "log", InterleavingLog())
    gate._stopping = OneProbe()  # type: ignore[assignment]
    gate._probe()
    assert watcher_done.wait(5), "the session watcher never got through"
    assert gate.lost
    assert context.dispatcher.paused, "dispatch reopened after the session was flagged lost"


def test_hammered_from_three_threads_the_flags_end_consistent() -> None:
    """Many rounds of the three threads at once: a LOST from the watcher, proofs from the
    prober, a RESUMED and a SUSPENDED applied on the poll thread. Whatever the order, once the
    poll thread has applied the loss the member is lost, not suspended, and dispatch is paused
    until the loss is handled or reopened by the poll thread itself."""
    for _ in range(300):
        gate, context = _gate()
        _three_threads_at_once(gate)
        assert gate.lost, "a LOST flagged by the watcher was undone"
        # Only the poll thread may reopen after a loss, and only by applying it.
        assert context.dispatcher.paused, "dispatch open while the loss is not handled yet"


def _three_threads_at_once(gate: SessionGate) -> None:
    start = threading.Barrier(3)

    def watcher() -> None:
        start.wait()
        gate._on_event(SessionEvent(SessionState.SUSPENDED, 1))
        gate._on_event(_lost())

    def prober() -> None:
        start.wait()
        for _ in range(3):
            gate._alive_until = 0.0
            gate._stopping = OneProbe()  # type: ignore[assignment]
            gate._probe()

    def poll() -> None:
        start.wait()
        gate._apply(SessionState.RESUMED)

    threads = [threading.Thread(target=t) for t in (watcher, prober, poll)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)


def test_a_resumed_applied_after_the_watcher_flagged_lost_does_not_reopen_dispatch() -> None:
    """The poll thread applies events in order, the watcher flags them at once: a RESUMED
    still in the inbox when LOST is flagged must not reopen dispatch (the LOST behind it does
    the fencing first)."""
    gate, context = _gate()
    gate._on_event(SessionEvent(SessionState.SUSPENDED, 1))
    gate._on_event(_lost())
    gate._apply(SessionState.RESUMED)
    assert gate.lost
    assert context.dispatcher.paused, "RESUMED reopened dispatch over a flagged loss"
