"""The exclusive member's side of the active role, without servers: how it reads the lock for
the role's producer, and how an activation that no member can complete ends.

A scripted kazoo client records every call. The real-server tests
(``test_exactly_once_role_failures.py``) run the same paths end to end.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooState

from coordinator.layout import GroupLayout
from coordinator.session import SessionEvent, SessionState
from keyshared.errors import ConfigurationError
from keyshared.kafka.seams import PlugContext, PollInbox
from keyshared.metrics import ConsumerMetrics
from keyshared.modes import exclusive
from keyshared.modes.exclusive import ExclusiveMember
from keyshared.runtime.dispatcher import Dispatcher
from keyshared.settings import ConsumerOptions
from tests.coordinator.conftest import NAMESPACE, WAIT_S

TOKEN = 7


class Client:
    """kazoo's client as the lock checks use it: the lock's znode is the lowest contender."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.state = KazooState.CONNECTED
        self.listeners: list[Callable[[str], Any]] = []
        self.listening = threading.Event()

    def sync(self, path: str) -> None:
        self.calls.append(("sync", path))

    def get_children(self, path: str) -> list[str]:
        self.calls.append(("get_children", path))
        return [f"x__lock__{TOKEN:010d}", f"y__lock__{TOKEN + 1:010d}"]

    def add_listener(self, listener: Callable[[str], Any]) -> None:
        self.listeners.append(listener)
        self.listening.set()

    def remove_listener(self, listener: Callable[[str], Any]) -> None:
        self.listeners.remove(listener)

    def becomes(self, state: str) -> None:
        self.state = state
        for listener in list(self.listeners):
            listener(state)


class Recipes:
    session_timeout = WAIT_S

    def __init__(self) -> None:
        self.client = Client()

    def layout(self, group: str) -> GroupLayout:
        return GroupLayout(group, NAMESPACE)


class Lock:
    token = TOKEN

    def cancel(self) -> None:
        pass


class Candidacy:
    def __init__(self) -> None:
        self.lock = Lock()
        self.since = 0.0
        self.withdrawn = False

    def withdraw(self) -> None:
        self.withdrawn = True


class RoleProducer:
    """The transactional committer as the member drives it."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def activate(self) -> None:
        self.log.append("activate")

    def deactivate(self) -> None:
        self.log.append("deactivate")


@pytest.fixture
def member() -> tuple[ExclusiveMember, Recipes, Candidacy]:
    group = f"g-{uuid.uuid4().hex[:8]}"
    zk = Recipes()
    context = PlugContext(
        group, "m", ["t"], ConsumerOptions(), Dispatcher(ConsumerOptions(), 1, lambda *_: None),
        PollInbox(), ConsumerMetrics(group, "m"), lambda: None, {"group.id": group},
    )  # fmt: skip
    member = ExclusiveMember(zk, context)  # type: ignore[arg-type]
    candidacy = Candidacy()
    member._candidacy = candidacy  # type: ignore[assignment]
    return member, zk, candidacy


def test_the_lock_check_syncs_the_lock_directory_before_reading_it(
    member: tuple[ExclusiveMember, Recipes, Candidacy],
) -> None:
    """Before: ``get_children`` alone, which a follower lagging behind the leader could answer
    with this member's znode already deleted (the next holder's init then fenced it)."""
    m, zk, _ = member
    assert m.still_held()
    active = zk.layout(m._group).active
    assert zk.client.calls == [("sync", active), ("get_children", active)]


def _suspend(m: ExclusiveMember, zk: Recipes) -> None:
    zk.client.state = KazooState.SUSPENDED
    m._gate._on_event(SessionEvent(SessionState.SUSPENDED, 1))


def test_the_lock_check_waits_out_a_dropped_connection_instead_of_giving_the_role_up(
    member: tuple[ExclusiveMember, Recipes, Candidacy],
) -> None:
    """Before: a SUSPENDED connection counted as "not held" at once, and the rebuild gave the
    role up (a fail-over) although the session and its lock lived on."""
    m, zk, _ = member
    _suspend(m, zk)
    back = threading.Thread(
        target=lambda: zk.client.listening.wait(WAIT_S) and zk.client.becomes(KazooState.CONNECTED)
    )
    back.start()
    try:
        assert m.still_held()
    finally:
        back.join()
    assert [c[0] for c in zk.client.calls] == ["sync", "get_children"]


def test_the_lock_check_gives_the_role_up_once_the_session_is_lost(
    member: tuple[ExclusiveMember, Recipes, Candidacy],
) -> None:
    m, zk, _ = member
    _suspend(m, zk)

    def lose() -> None:
        if zk.client.listening.wait(WAIT_S):
            m._gate._on_event(SessionEvent(SessionState.LOST, 1))
            zk.client.becomes(KazooState.LOST)

    gone = threading.Thread(target=lose)
    gone.start()
    try:
        assert not m.still_held()
    finally:
        gone.join()
    assert zk.client.calls == []


def test_a_missing_topic_at_activation_drops_the_role_producer_and_stops_the_run(
    member: tuple[ExclusiveMember, Recipes, Candidacy], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the producer of the role stayed built (holding the role's transactional.id)
    until ``leave()``, unlike at every other end of the role."""
    m, _, candidacy = member
    producer = RoleProducer()
    m._role_producer = producer  # type: ignore[assignment]
    m._events, m._committer = object(), object()  # type: ignore[assignment]

    def missing(*_: Any) -> list[tuple[str, int]]:
        raise ConfigurationError("topics", "topic 't' does not exist")

    monkeypatch.setattr(exclusive, "_partitions_of", missing)
    m._activate(candidacy)  # type: ignore[arg-type]
    assert producer.log == ["activate", "deactivate"]
    assert candidacy.withdrawn and m._candidacy is None
    with pytest.raises(ConfigurationError, match="does not exist"):
        m.tick()
