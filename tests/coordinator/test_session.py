"""The session: a bounded connect that names the hosts, and SUSPENDED / RESUMED / LOST /
RENEWED delivered on the watcher's own thread."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator

import kazoo.retry
import pytest

from coordinator.errors import CoordinatorUnreachable
from coordinator.session import SessionEvent, SessionState, SessionWatcher, connect
from keyshared.dev import LocalCluster
from keyshared.errors import UnreachableError
from tests.coordinator.conftest import WAIT_S, ClientFactory, closed_port, expire_session, take
from tests.partitions.proxy import FaultyLink


def test_unreachable_zookeeper_fails_within_the_bound_naming_hosts() -> None:
    hosts = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    with pytest.raises(CoordinatorUnreachable) as caught:
        connect(hosts, connect_timeout=1.5)
    elapsed = time.monotonic() - started
    assert elapsed < 1.5 + 2.0, f"took {elapsed:.1f} s for a 1.5 s bound"
    assert hosts in str(caught.value) and "1.5 s" in str(caught.value)
    assert isinstance(caught.value, UnreachableError)


def test_connect_returns_a_started_client(zookeeper_hosts: str) -> None:
    client = connect(zookeeper_hosts, session_timeout=5)
    try:
        assert client.connected
        assert client.exists("/") is not None
    finally:
        client.stop()
        client.close()


def test_expiry_reports_lost_then_renewed(zk_client: ClientFactory, zookeeper_hosts: str) -> None:
    client = zk_client()
    events: queue.Queue[SessionEvent] = queue.Queue()
    callback_threads: set[str] = set()

    def on_event(event: SessionEvent) -> None:
        callback_threads.add(threading.current_thread().name)
        events.put(event)

    watcher = SessionWatcher(client, on_event)
    old_session = client.client_id[0]
    expire_session(client, zookeeper_hosts)
    states = [take(events, "session event").state for _ in range(2)]
    assert SessionState.LOST in states
    if states[-1] != SessionState.RENEWED:
        states.append(take(events, "RENEWED").state)
    assert states[-1] == SessionState.RENEWED
    watcher.stop()
    assert callback_threads == {"keyshared-zk-session"}
    assert client.client_id[0] != old_session


def test_a_blocking_callback_does_not_block_kazoo(zk_client: ClientFactory) -> None:
    """The callback may block (or use ZooKeeper) because it runs on the watcher's thread."""
    client = zk_client()
    release = threading.Event()
    seen: queue.Queue[SessionState] = queue.Queue()

    def slow(event: SessionEvent) -> None:
        seen.put(event.state)
        client.exists("/")  # a ZooKeeper call from the callback
        release.wait(WAIT_S)

    watcher = SessionWatcher(client, slow)
    watcher._listener("SUSPENDED")  # as kazoo's connection thread calls it
    assert take(seen, "callback") == SessionState.SUSPENDED
    assert client.exists("/") is not None  # the client still works meanwhile
    release.set()
    watcher.stop()


@pytest.mark.slow
def test_zookeeper_restart_reports_suspended_then_resumed(
    local_cluster: LocalCluster, zk_client: ClientFactory
) -> None:
    """A real outage shorter than the session: SUSPENDED, then RESUMED with the same session."""
    client = zk_client(session_timeout=30.0)
    events: queue.Queue[SessionEvent] = queue.Queue()
    watcher = SessionWatcher(client, events.put)
    session = client.client_id[0]
    local_cluster.stop_zookeeper()
    try:
        assert take(events, "SUSPENDED", timeout=30).state == SessionState.SUSPENDED
    finally:
        local_cluster.start_zookeeper()
    resumed = take(events, "RESUMED", timeout=45)
    assert resumed.state == SessionState.RESUMED
    assert resumed.session_id == session
    watcher.stop()


class _WorstJitter:
    """Stands in for the ``random`` module in ``kazoo.retry``: every pause at the top of its
    jitter (+40 %), the schedule the reconnection policy must survive."""

    @staticmethod
    def uniform(low: float, high: float) -> float:
        return high


OUTAGE_S = 2.5
"""How long no server answers. kazoo's default backoff at the jitter's worst tries at 0.14,
0.53 and 1.63 s, then waits 3.1 s: its fourth try, at 4.7 s, comes after the server expired a
4 s session. The member's policy (at most 1.4 s between tries) tries at 3.03 s."""


@contextlib.contextmanager
def _member_behind(
    link: FaultyLink,
) -> Iterator[tuple[queue.Queue[SessionEvent], int]]:
    """A 4 s session through ``link``, its session events and id; the server heard from it
    just now."""
    client = connect(link.address, session_timeout=4.0)
    events: queue.Queue[SessionEvent] = queue.Queue()
    watcher = SessionWatcher(client, events.put)
    try:
        session = client.client_id[0]
        client.exists("/")
        yield events, session
    finally:
        watcher.stop()
        client.stop()
        client.close()


def test_a_member_is_back_within_its_session_after_an_outage_longer_than_its_backoff(
    zookeeper_hosts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that is down for a couple of seconds (a restart, an election) must not cost a
    member its session: the member's reconnection attempts stay close enough together that it
    is back before the server expires it, whatever kazoo's jitter draws."""
    monkeypatch.setattr(kazoo.retry, "random", _WorstJitter())
    with FaultyLink(zookeeper_hosts) as link, _member_behind(link) as (events, session):
        link.cut()  # connections refused from now: each attempt fails at once
        assert take(events, "SUSPENDED").state == SessionState.SUSPENDED
        time.sleep(OUTAGE_S)  # the outage itself, not a wait for an event
        link.heal()
        back = take(events, "the session back")
        assert (back.state, back.session_id) == (SessionState.RESUMED, session), (
            f"the member lost its session in a {OUTAGE_S} s outage: {back}"
        )


REFUSED_S = 1.0
"""How long the server refuses connections before it takes one and never answers it: the
member's attempts have backed off to about a second by then."""


def test_a_member_is_back_within_its_session_when_a_reconnection_is_never_answered(
    zookeeper_hosts: str,
) -> None:
    """A server restarting under load took a member's reconnection and never answered it (CI,
    2026-11-29: the member's handshake hung 4 s, its whole session, and the server expired it
    before its next attempt). kazoo waits ``session timeout / number of hosts`` for that
    answer; the member lists its one server four times, so it gives up after a quarter
    session and tries again while the session lives."""
    with FaultyLink(zookeeper_hosts) as link, _member_behind(link) as (events, session):
        link.cut()  # the member's connection drops; the server is down
        assert take(events, "SUSPENDED").state == SessionState.SUSPENDED
        time.sleep(REFUSED_S)  # the outage itself, not a wait for an event
        link.hang_new()  # starting: the member's next attempt is taken, never answered
        assert link.hung.wait(WAIT_S), "the member did not try to reconnect"
        link.heal()  # connections from now on go through; the hung one stays hung
        back = take(events, "the session back")
        assert (back.state, back.session_id) == (SessionState.RESUMED, session), (
            f"a reconnection that was never answered cost the member its session: {back}"
        )


@pytest.mark.parametrize(
    ("hosts", "listed"),
    [
        ("127.0.0.1:2181", "127.0.0.1:2181,127.0.0.1:2181,127.0.0.1:2181,127.0.0.1:2181"),
        ("a:1,b:2,c:3/ks", "a:1,b:2,c:3,a:1,b:2,c:3/ks"),
        ("a:1, b:2", "a:1,b:2,a:1,b:2"),
        ("a:1,b:2,c:3,d:4,e:5", "a:1,b:2,c:3,d:4,e:5"),
    ],
)
def test_each_server_is_listed_so_a_handshake_waits_a_quarter_session_at_most(
    hosts: str, listed: str
) -> None:
    from kazoo.hosts import collect_hosts

    from coordinator.session import HANDSHAKE_SHARE, handshake_hosts

    assert handshake_hosts(hosts) == listed
    servers, chroot = collect_hosts(handshake_hosts(hosts))
    assert 1 / len(servers) <= HANDSHAKE_SHARE
    assert chroot == collect_hosts(hosts)[1]
