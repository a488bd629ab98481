"""``SessionGate`` under three threads: the session watcher, the liveness prober, the poll thread.

Broker-less: a fake coordinator, and a fake or a real dispatcher. The race: the prober saw the
flags clear and was about to reopen dispatch when the session watcher flagged the session LOST and
paused dispatch; the prober then reopened it, and workers started records of work the member
no longer held, until the poll thread handled the loss. The prober's check and its reopening
must be one step with respect to the watcher's flag and pause.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from coordinator.session import SessionEvent, SessionState
from keyshared.core.modes import Mode
from keyshared.metrics import ConsumerMetrics
from keyshared.modes import session_gate
from keyshared.modes.session_gate import SessionGate
from keyshared.runtime.dispatcher import LIVENESS_HOLD, Dispatcher, Work
from keyshared.runtime.partition import PartitionState
from keyshared.settings import ConsumerOptions
from tests.kafka.support.fake_consumer import FakeMessage


class FakeDispatcher:
    """The dispatcher's holds, and nothing else of it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: set[str] = set()

    @property
    def paused(self) -> bool:
        return bool(self.held)

    def set_liveness(self, live: Any) -> None:
        pass

    def take_hold(self, name: str) -> None:
        with self.lock:
            self.held.add(name)

    def lift_hold(self, name: str) -> bool:
        with self.lock:
            if name not in self.held:
                return False
            self.held.discard(name)
            return True


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
    context.dispatcher.take_hold(LIVENESS_HOLD)  # what dispatch did during the stall
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


# -- the liveness hold: lifted by whichever proof leaves the member live ------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class RealContext:
    """A real dispatcher over one partition whose workers are ``self.started``."""

    group = "g"
    member_id = "m"

    def __init__(self) -> None:
        self.started: list[Work] = []
        self.dispatcher = Dispatcher(
            ConsumerOptions(mode=Mode.EXCLUSIVE), 2, lambda _w, works: self.started.extend(works)
        )
        self.inbox = FakeInbox()
        self.metrics = ConsumerMetrics("g-liveness", "m")
        self.state = PartitionState("t", 0, self.metrics.partition("t", 0), committed=0)


def test_a_hold_taken_while_a_slow_probe_was_in_flight_is_lifted_when_it_answers() -> None:
    """Session 10 s: a proof is good for 5 s after it was sent, a probe goes out every 2 s.
    Probe k is sent at S and answers 2 s later; probe k+1 is sent at S + 4 (inside the window)
    and also takes 2 s. Between S + 5 and S + 6 the member is not live and a record taking
    the hold is queued; probe k+1's answer at S + 6 proves the session until S + 9. Lifting
    only when the answering probe was *sent* outside the window left that hold in place for
    good: every later probe is sent inside the window it just extended."""
    clock = Clock()
    context = RealContext()
    gate = SessionGate(FakeZk(), context, lambda: None, lambda: None, clock=clock)  # type: ignore[arg-type]
    context.dispatcher.set_liveness(gate.live)
    start = clock.now
    clock.now = start + 2.0
    gate.proved(sent=start)  # probe k: live until S + 5
    clock.now = start + 5.5  # probe k+1 (sent at S + 4) still in flight
    assert not gate.live()
    context.dispatcher.admit(context.state, [FakeMessage("t", 0, 0, b"k")])
    assert context.started == [], "a record started while the session was not proven"
    assert LIVENESS_HOLD in context.dispatcher.holds()
    clock.now = start + 6.0
    gate.proved(sent=start + 4.0)  # probe k+1 answers: live until S + 9
    assert gate.live()
    assert context.dispatcher.holds() == {}, "the liveness hold outlived its reason"
    assert [entry.offset for _, entry in context.started] == [0]
    context.metrics.close()


def test_a_proof_that_leaves_the_member_stale_lifts_nothing() -> None:
    """A probe whose answer came after its own window closed proves nothing for now."""
    clock = Clock()
    context = RealContext()
    gate = SessionGate(FakeZk(), context, lambda: None, lambda: None, clock=clock)  # type: ignore[arg-type]
    context.dispatcher.set_liveness(gate.live)
    clock.now += 6.0  # the window (5 s) closed
    context.dispatcher.admit(context.state, [FakeMessage("t", 0, 0, b"k")])
    gate.proved(sent=clock.now - 5.5)  # answered 5.5 s after it was sent
    assert LIVENESS_HOLD in context.dispatcher.holds()
    assert context.started == []
    gate.proved(sent=clock.now - 0.1)
    assert context.dispatcher.holds() == {}
    assert [entry.offset for _, entry in context.started] == [0]
    context.metrics.close()


def test_the_liveness_proof_never_lifts_the_connection_hold() -> None:
    """Two owners, two holds: a proof of the session does not reopen dispatch while the
    connection is down; RESUMED lifts the connection hold."""
    clock = Clock()
    context = RealContext()
    gate = SessionGate(FakeZk(), context, lambda: None, lambda: None, clock=clock)  # type: ignore[arg-type]
    context.dispatcher.set_liveness(gate.live)
    gate._on_event(SessionEvent(SessionState.SUSPENDED, 1))
    context.dispatcher.admit(context.state, [FakeMessage("t", 0, 0, b"k")])
    gate.proved(sent=clock.now)
    assert list(context.dispatcher.holds()) == [session_gate.CONNECTION_HOLD]
    assert context.started == []
    gate._apply(SessionState.SUSPENDED)
    gate._apply(SessionState.RESUMED)
    assert context.dispatcher.holds() == {}
    assert [entry.offset for _, entry in context.started] == [0]
    context.metrics.close()


def test_a_resumed_posted_before_a_new_suspension_does_not_lift_its_hold() -> None:
    """The watcher flags SUSPENDED, RESUMED and SUSPENDED again before the poll thread applies
    the first two: the RESUMED belongs to the first suspension and must not reopen dispatch
    (nor clear the flag) while the connection is down again."""
    gate, context = _gate()
    context.dispatcher.lift_hold(LIVENESS_HOLD)
    gate._on_event(SessionEvent(SessionState.SUSPENDED, 1))
    gate._on_event(SessionEvent(SessionState.RESUMED, 1))
    gate._on_event(SessionEvent(SessionState.SUSPENDED, 1))
    for apply in list(context.inbox.posted)[:2]:
        apply()
    assert gate.suspended, "a stale RESUMED cleared the suspension"
    assert context.dispatcher.paused, "a stale RESUMED reopened dispatch"
    context.inbox.posted[2]()
    assert gate.suspended and context.dispatcher.paused
