"""The member's registry of holdings (``keyshared.modes.holdings``): one holding per thing from
WAITING until it is let go, the hand-back carrying that same object on to RELEASED.

A hypothesis state machine plays a member that wants, is granted, drains, withdraws and lets go
a few names in any order, against a model of the phase each name should be in; a transition
the life cycle forbids must raise and leave the registry as it was.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from keyshared.core.holding import Holding, HoldingError, HoldingView, Phase, Step
from keyshared.core.slots import SlotRange
from keyshared.modes.handback import HandBack
from keyshared.modes.held_ranges import HeldRanges
from keyshared.modes.holdings import Holdings

NAMES = st.sampled_from(("t[0]", "t[1]", "0-32767"))


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class HoldingsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = _Clock()
        self.holdings = Holdings(self.clock)
        self.model: dict[str, tuple[Phase, float]] = {}
        self.let_go: list[Holding] = []
        self.earlier: list[tuple[tuple[HoldingView, ...], list[HoldingView]]] = []

    def _attempt(self, allowed: bool, action: object) -> None:
        before = self.holdings.snapshot()
        if allowed:
            action()  # type: ignore[operator]
            return
        try:
            action()  # type: ignore[operator]
        except HoldingError:
            assert self.holdings.snapshot() == before
        else:
            raise AssertionError("a forbidden transition was allowed")

    @rule(seconds=st.integers(0, 10))
    def tick(self, seconds: int) -> None:
        self.clock.now += seconds

    @rule(name=NAMES)
    def want(self, name: str) -> None:
        allowed = name not in self.model
        self._attempt(allowed, lambda: self.holdings.want(name))
        if allowed:
            self.model[name] = (Phase.WAITING, self.clock.now)

    @rule(name=NAMES)
    def grant(self, name: str) -> None:
        allowed = self.model.get(name, (None,))[0] is Phase.WAITING
        self._attempt(allowed, lambda: self.holdings.grant(name))
        if allowed:
            self.model[name] = (Phase.ACTIVE, self.clock.now)

    @rule(name=NAMES)
    def drain(self, name: str) -> None:
        allowed = self.model.get(name, (None,))[0] is Phase.ACTIVE
        self._attempt(allowed, lambda: self.holdings.drain(name))
        if allowed:
            self.model[name] = (Phase.DRAINING, self.clock.now)

    @rule(name=NAMES)
    def withdraw(self, name: str) -> None:
        allowed = self.model.get(name, (Phase.WAITING,))[0] is Phase.WAITING
        self._attempt(allowed, lambda: self.holdings.withdraw(name))
        if allowed:
            self.model.pop(name, None)

    @rule(name=NAMES)
    def let_go_one(self, name: str) -> None:
        held = self.holdings.get(name)
        holding = self.holdings.let_go(name)
        assert holding.name == name
        assert held is None or holding is held  # the same object goes on to the hand-back
        self.model.pop(name, None)
        holding.hand_back()
        self.let_go.append(holding)

    @invariant()
    def matches_the_model(self) -> None:
        snapshot = self.holdings.snapshot()
        assert [name for name, _, _ in snapshot] == sorted(self.model)
        for name, phase, age in snapshot:
            assert (phase, age) == (self.model[name][0], self.clock.now - self.model[name][1])
            assert age >= 0
            assert self.holdings.phase(name) is phase
        assert len(self.holdings) == len(self.model)

    @invariant()
    def the_published_copy_is_the_registry_as_of_the_last_change(self) -> None:
        published = self.holdings.published()
        assert isinstance(published, tuple)  # replaced whole: a reader's copy never changes
        expected = [(n, phase, since) for n, (phase, since) in sorted(self.model.items())]
        assert [(v.name, v.phase, v.since) for v in published] == expected
        self.earlier.append((published, list(published)))
        for copy, as_taken in self.earlier[-5:]:
            assert list(copy) == as_taken

    @invariant()
    def let_go_holdings_are_not_in_the_registry(self) -> None:
        for holding in self.let_go:
            assert holding.phase is Phase.HANDING_BACK
            assert self.holdings.get(holding.name) is not holding


TestHoldings = HoldingsMachine.TestCase


class _Idle:
    """A dispatcher with no call running."""

    def running(self, states: object) -> int:
        return 0


def test_the_hand_back_carries_the_members_holding_to_its_release() -> None:
    holdings = Holdings()
    holdings.want("t[0]")
    holdings.grant("t[0]")
    holdings.drain("t[0]")
    holding = holdings.let_go("t[0]")
    released: list[str] = []
    hand_back = HandBack(_Idle(), connected=lambda: True)  # type: ignore[arg-type]
    hand_back.add("t[0]", lambda: released.append("t[0]"), holding=holding)
    assert released == ["t[0]"]
    assert holding.phase is Phase.RELEASED
    assert holding.step(running=0, connected=True) is Step.WAIT
    assert "t[0]" not in holdings


def test_a_range_is_held_only_once_its_holding_is_granted() -> None:
    """``HeldRanges.add`` of a range nobody wanted raises and holds nothing: a lease kept that
    the registry does not show would be one that no status, drain or hand-back knows of."""
    hand_back = HandBack(_Idle(), connected=lambda: True)  # type: ignore[arg-type]
    held = HeldRanges(
        SimpleNamespace(),  # type: ignore[arg-type]
        lambda lease: SimpleNamespace(),  # type: ignore[arg-type, return-value]
        lambda: None,
        hand_back,
    )
    lease = SimpleNamespace(key="0-99", token=1)
    with pytest.raises(HoldingError):
        held.add(SlotRange(0, 99), lease)  # type: ignore[arg-type]
    assert SlotRange(0, 99) not in held and "0-99" not in held.holdings
    held.holdings.want("0-99")
    held.add(SlotRange(0, 99), lease)  # type: ignore[arg-type]
    assert SlotRange(0, 99) in held and held.holdings.phase("0-99") is Phase.ACTIVE


def test_the_hand_back_publishes_what_it_has_not_released_yet() -> None:
    """A lease kept for a straggler shows as HANDING_BACK with its age until it is released;
    one whose znode went shows as not alive."""
    clock = _Clock()
    running = {"calls": 1}
    dispatcher = SimpleNamespace(running=lambda states: running["calls"])
    hand_back = HandBack(dispatcher, connected=lambda: True, clock=clock)  # type: ignore[arg-type]
    clock.now = 5.0
    hand_back.add("t[0]", lambda: None, states=[])
    hand_back.add("t[1]", lambda: None, states=[], alive=False)
    views = hand_back.published()
    assert [(v.name, v.phase, v.since, v.alive) for v in views] == [
        ("t[0]", Phase.HANDING_BACK, 5.0, True),
        ("t[1]", Phase.HANDING_BACK, 5.0, False),
    ]
    running["calls"] = 0
    hand_back.tick()
    assert hand_back.published() == ()
    assert len(views) == 2  # the copy read earlier is unchanged
