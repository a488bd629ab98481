"""The holding life cycle (``keyshared.core.holding``): examples, and a hypothesis state machine.

The machine plays a member with a few things it holds, a ZooKeeper that may drop the connection
(a release then fails and must be retried) or expire the session, and handlers that start and
end calls. It follows :meth:`Holding.step` the way the adapters do, and checks the rule after
every step: no znode is deleted while a call of its keys runs, no call starts outside ACTIVE,
one thing never runs twice at once in the member, and at the end nothing handed back is left
standing (no leaked lease).
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from keyshared.core.holding import Holding, HoldingError, Phase, Step

NAMES = ("p0", "p1", "lock")


def test_a_straggler_holds_the_release_back() -> None:
    h = Holding("orders@3")
    h.grant()
    h.drain()
    h.hand_back(written=True)
    assert h.step(running=1, connected=True) is Step.WAIT
    assert h.step(running=0, connected=False) is Step.WAIT
    assert h.step(running=0, connected=True) is Step.RELEASE
    h.released()
    assert h.phase is Phase.RELEASED


def test_unwritten_cursors_are_written_before_the_release() -> None:
    h = Holding("0-32767")
    h.grant()
    h.hand_back(written=False)
    assert h.step(running=0, connected=True) is Step.WRITE
    h.cursors_written()
    assert h.step(running=0, connected=True) is Step.RELEASE


def test_a_fenced_holding_is_forgotten_once_its_stragglers_end_and_blocks_a_retake_until() -> None:
    h = Holding("active")
    h.grant()
    h.fenced()
    assert not h.may_commit and not h.may_dispatch
    assert h.blocks_retake(running=2)
    assert h.step(running=2, connected=True) is Step.WAIT
    assert h.step(running=0, connected=False) is Step.FORGET


def test_a_withdrawn_acquisition_deletes_its_znode_too() -> None:
    h = Holding("p1")
    h.hand_back()
    assert h.step(running=0, connected=True) is Step.RELEASE


def test_transitions_out_of_order_are_refused() -> None:
    h = Holding("p0")
    with pytest.raises(HoldingError):
        h.drain()
    h.grant()
    with pytest.raises(HoldingError):
        h.released()
    h.hand_back()
    h.released()
    with pytest.raises(HoldingError):
        h.hand_back()


class Member(RuleBasedStateMachine):
    """A member's holdings against a model of ZooKeeper's znodes and of running calls."""

    def __init__(self) -> None:
        super().__init__()
        self.holdings: list[Holding] = []  # every holding ever made, old ones included
        self.running: dict[int, int] = {}  # id(holding) -> calls of its keys running
        self.znode: dict[int, bool] = {}  # id(holding) -> its znode exists
        self.connected = True
        self.deleted_while_running = 0

    def _current(self, name: str) -> Holding | None:
        live = [h for h in self.holdings if h.name == name and h.phase is not Phase.RELEASED]
        return live[-1] if live else None

    # -- ZooKeeper ------------------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES))
    def queue(self, name: str) -> None:
        """A plan, an assignment or a candidacy wants ``name``: a znode is queued."""
        current = self._current(name)
        if current is not None and current.phase is not Phase.HANDING_BACK:
            return  # already wanted or held
        if not self.connected:
            return  # creating needs the connection
        h = Holding(name)
        self.holdings.append(h)
        self.running[id(h)] = 0
        self.znode[id(h)] = True

    @rule(name=st.sampled_from(NAMES))
    def grant(self, name: str) -> None:
        h = self._current(name)
        if h is None or h.phase is not Phase.WAITING or not h.alive:
            return
        old_calls = sum(self.running[id(o)] for o in self.holdings if o.name == name and o is not h)
        if any(o.blocks_retake(self.running[id(o)]) for o in self.holdings if o.name == name):
            return  # the adapter holds the grant back until its own stragglers end
        assert old_calls == 0
        h.grant()

    @rule(connected=st.booleans())
    def connection(self, connected: bool) -> None:
        self.connected = connected

    @rule()
    def session_expires(self) -> None:
        for h in self.holdings:
            if h.phase is not Phase.RELEASED:
                self.znode[id(h)] = False
                h.fenced()
        self.connected = True  # a new session

    # -- calls ----------------------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES))
    def start_call(self, name: str) -> None:
        h = self._current(name)
        if h is not None and h.may_dispatch:
            self.running[id(h)] += 1

    @rule(data=st.data())
    def end_call(self, data: st.DataObject) -> None:
        busy = [h for h in self.holdings if self.running[id(h)] > 0]
        if busy:
            h = data.draw(st.sampled_from(busy))
            self.running[id(h)] -= 1

    # -- giving back ----------------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES))
    def drain(self, name: str) -> None:
        h = self._current(name)
        if h is not None and h.phase is Phase.ACTIVE:
            h.drain()

    @rule(name=st.sampled_from(NAMES), written=st.booleans())
    def hand_back(self, name: str, written: bool) -> None:
        """Revoke, plan change, shutdown past the drain timeout, or an exception."""
        h = self._current(name)
        if h is not None:
            h.hand_back(written=written and h.alive)

    @rule()
    def tick(self) -> None:
        """The adapter's tick: follow each holding's step; a release may fail (connection)."""
        for h in self.holdings:
            self._follow(h)

    def _follow(self, h: Holding) -> None:
        step = h.step(self.running[id(h)], self.connected)
        if step is Step.WRITE:
            h.cursors_written()
        elif step is Step.RELEASE:
            if self.running[id(h)] > 0:
                self.deleted_while_running += 1
            self.znode[id(h)] = False
            h.released()
        elif step is Step.FORGET:
            assert not self.znode[id(h)]
            h.released()

    # -- the rule -------------------------------------------------------------------------------

    @invariant()
    def nothing_released_while_its_calls_run(self) -> None:
        assert self.deleted_while_running == 0
        for h in self.holdings:
            if h.phase is Phase.RELEASED:
                assert self.running[id(h)] == 0 or not h.alive

    @invariant()
    def one_thing_never_runs_twice_at_once_here(self) -> None:
        for name in NAMES:
            running = [h for h in self.holdings if h.name == name and self.running[id(h)] > 0]
            assert len(running) <= 1, f"{name} runs in two holdings at once"

    @invariant()
    def calls_run_only_where_allowed(self) -> None:
        for h in self.holdings:
            if self.running[id(h)] > 0:
                assert h.phase in (Phase.ACTIVE, Phase.DRAINING, Phase.HANDING_BACK)

    @precondition(lambda self: bool(self.holdings))
    @rule()
    def everything_ends(self) -> None:
        """Shutdown: every holding handed back, every call ends, the connection comes back;
        after one tick nothing handed back may be left standing."""
        for h in self.holdings:
            if h.phase is not Phase.RELEASED:
                h.hand_back(written=h.alive)
            self.running[id(h)] = 0
        self.connected = True
        for h in self.holdings:
            self._follow(h)
            if h.phase is not Phase.RELEASED:
                self._follow(h)  # WRITE first, then RELEASE
        assert all(h.phase is Phase.RELEASED for h in self.holdings)
        assert not any(self.znode.values()), "a znode leaked"


TestMember = Member.TestCase
TestMember.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
