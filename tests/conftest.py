"""Shared fixtures: a real Kafka broker and ZooKeeper server for the whole test session.

Where the servers come from, first match wins:

1. `KEYSHARED_BOOTSTRAP_SERVERS` / `KEYSHARED_ZOOKEEPER` (e.g. after
   `eval "$(keyshared dev env)"`): that cluster is used and never stopped by the tests.
2. `KEYSHARED_TEST_BACKEND=containers` (or `auto`): `keyshared.testing.kafka_cluster` chooses,
   e.g. testcontainers of the locally built image (docs/local-cluster.md). Opt-in only, so a
   machine that happens to run a Docker engine (CI does, for tests/testing/) keeps the suite
   on the servers it was measured on.
3. Otherwise a `LocalCluster` (java + the cached jars) in a temporary runtime folder owned by
   this session, started on first use and stopped at the end.

`topology_cluster` is a second, separate cluster for the production topology (issue 27): three
Kafka nodes and a three-member ZooKeeper ensemble (`keyshared.dev.topology.TopologyCluster`),
started on first use and stopped at the end of the session, so the tests that do not ask for
it run on the single-node servers as before. `KEYSHARED_TOPOLOGY_DIR` names the runtime folder
of a running one (`keyshared dev up --brokers 3 --zookeepers 3 --runtime-dir DIR`) to reuse
instead; it is left running.

Everything is lazy: a run that selects no test using these fixtures (`pytest -m unit`) starts
no server.

Tests marked `scale_real` (many real members on this machine, 8-20 minutes each;
docs/scaling.md, "24 real members") run only with `--scale-real`; otherwise they are
deselected, not skipped, so a run (CI's included) neither runs nor counts them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn, cast

import pytest

from keyshared.dev import BOOTSTRAP_ENV, ZOOKEEPER_ENV, LocalCluster
from keyshared.dev.topics import GroupFactory, TopicFactory, topic_factory, unique_name
from keyshared.dev.topology import TopologyCluster
from keyshared.testing import BACKEND_ENV, Backend, kafka_cluster
from tests.chaos.plan import TOPOLOGY_OFFSET_RETENTION_MIN

# Fixtures that need a live server: a test using any of them is an integration test.
_SERVER_FIXTURES = {
    "kafka_bootstrap",
    "zookeeper_hosts",
    "local_cluster",
    "new_topic",
    "topology_cluster",
}
TOPOLOGY_DIR_ENV = "KEYSHARED_TOPOLOGY_DIR"
# Six server JVMs on a shared two-core machine: a node restarted under load has been seen to
# take 65 s to rejoin (catching up on the metadata log, recovering its partitions).
_TOPOLOGY_START_TIMEOUT_S = 180.0
# Markers that say a test is more than a unit test, whatever fixtures it uses.
_NOT_UNIT = ("integration", "slow", "chaos", "chaos_open", "topology", "scale_real")
_UNIT_TIMEOUT_S = 60


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("scale-real", "real-member scale runs (docs/scaling.md)")
    group.addoption(
        "--scale-real",
        action="store_true",
        default=False,
        help="run the tests marked scale_real: 24 real key_shared members through a rolling "
        "restart and through a kill every 5 s (8-20 minutes each; never in CI).",
    )
    group.addoption(
        "--scale-real-members",
        type=int,
        default=24,
        help="scale_real tests: how many members (default 24).",
    )
    group.addoption(
        "--scale-real-source",
        default=None,
        help="scale_real tests: the source tree the members import keyshared from (their "
        "PYTHONPATH), e.g. a worktree of an older commit; default: this tree. Give it as "
        "--scale-real-source=DIR (a separate DIR is taken for a test path).",
    )
    group.addoption(
        "--scale-real-kill-seconds",
        type=float,
        default=300.0,
        help="scale_real tests: how long members are SIGKILLed, one every 5 s (default 300).",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test `unit` that uses no server fixture and is not marked otherwise, tests
    that use a server fixture `integration`, those on the topology `topology`.

    A module that starts servers or processes of its own (not through these fixtures) says so
    with ``pytestmark = pytest.mark.integration``; if it forgets, the guard below fails its
    tests the first time they start a process as `unit`, so the marker cannot drift.
    """
    if not config.getoption("--scale-real"):
        left_out = [item for item in items if item.get_closest_marker("scale_real") is not None]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if item.get_closest_marker("scale_real") is None]
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        uses_servers = bool(_SERVER_FIXTURES & fixtures)
        if uses_servers:
            if item.get_closest_marker("unit") is not None:
                raise pytest.UsageError(
                    f"{item.nodeid} is marked unit but uses a server fixture "
                    f"({', '.join(sorted(_SERVER_FIXTURES & fixtures))})"
                )
            item.add_marker(pytest.mark.integration)
        elif not any(item.get_closest_marker(m) for m in _NOT_UNIT):
            item.add_marker(pytest.mark.unit)
        if "topology_cluster" in fixtures:
            # Six more JVMs: `-m "not topology"` leaves them out of a quick run.
            item.add_marker(pytest.mark.topology)
        if item.get_closest_marker("unit") is not None and not item.get_closest_marker("timeout"):
            # No server, no subprocess: a deadlock here should fail in seconds, not minutes.
            item.add_marker(pytest.mark.timeout(_UNIT_TIMEOUT_S))


class UnitTestStartedAProcess(AssertionError):
    """A test marked `unit` (by hand or automatically) started a process."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _no_process_if_unit(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _no_process_if_unit(item):
        return (yield)


@contextlib.contextmanager
def _no_process_if_unit(item: pytest.Item) -> Iterator[None]:
    """While a `unit` test (and its fixtures, wider-scoped ones included) is set up and runs,
    starting a process fails it, naming the fix. Covers subprocess, multiprocessing (both go
    through ``Popen._execute_child`` or ``os.fork``) and so the JVMs of Kafka, ZooKeeper and
    Spark."""
    if item.get_closest_marker("unit") is None:
        yield
        return

    def refuse(*_args: object, **_kwargs: object) -> NoReturn:
        raise UnitTestStartedAProcess(
            f"{item.nodeid} is marked unit but started a process: give its module "
            "`pytestmark = pytest.mark.integration` (tests/conftest.py)"
        )

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", refuse)
        patch.setattr(os, "fork", refuse)
        yield


@dataclass
class _Servers:
    """The session's servers and, when this session started them locally, their cluster."""

    bootstrap: str
    zookeeper: str
    cluster: LocalCluster | None = None
    skip_reason: str | None = None


@pytest.fixture(scope="session")
def _session_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Servers]:
    """Start Kafka and ZooKeeper for this session (a LocalCluster unless the backend is set)."""
    backend = cast(Backend, os.environ.get(BACKEND_ENV, "local"))
    if backend != "local":
        with kafka_cluster(backend) as chosen:
            yield _Servers(
                chosen.bootstrap_servers,
                chosen.zookeeper_hosts,
                chosen.local,
                skip_reason=f"the session's servers are {chosen.backend}; "
                "restart tests need a LocalCluster",
            )
        return
    cluster = LocalCluster(tmp_path_factory.mktemp("keyshared-cluster"))
    try:
        status = cluster.up()
        assert status.kafka.address and status.zookeeper.address
        yield _Servers(status.kafka.address, status.zookeeper.address, cluster)
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> str:
    """`host:port` of a real Kafka broker (auto topic creation off)."""
    external = os.environ.get(BOOTSTRAP_ENV)
    if external:
        return external
    servers: _Servers = request.getfixturevalue("_session_servers")
    return servers.bootstrap


@pytest.fixture(scope="session")
def zookeeper_hosts(request: pytest.FixtureRequest) -> str:
    """`host:port` of a real ZooKeeper server, as kazoo's `hosts`."""
    external = os.environ.get(ZOOKEEPER_ENV)
    if external:
        return external
    servers: _Servers = request.getfixturevalue("_session_servers")
    return servers.zookeeper


@pytest.fixture
def local_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """The session's `LocalCluster`, for tests that stop and restart a server.

    Skips when the servers are external or containers (they cannot be restarted from here).
    After the test both servers are running again, whatever the test stopped.
    """
    if os.environ.get(BOOTSTRAP_ENV) or os.environ.get(ZOOKEEPER_ENV):
        pytest.skip(
            f"{BOOTSTRAP_ENV}/{ZOOKEEPER_ENV} point at an external cluster; "
            "restart tests need the session's own LocalCluster"
        )
    servers: _Servers = request.getfixturevalue("_session_servers")
    if servers.cluster is None:
        pytest.skip(servers.skip_reason or "the session's servers are not a LocalCluster")
    cluster = servers.cluster
    yield cluster
    cluster.up()


def _offset_expiry_asked(config: pytest.Config) -> bool:
    """Whether the session runs the full or long chaos plans (``--chaos``, ``--chaos-minutes``),
    the only ones with the offset-expiry fault."""
    from tests.chaos.conftest import all_chaos  # its options exist only with tests/chaos

    try:
        return all_chaos(config)
    except ValueError:  # tests/chaos is not part of this session
        return False


@pytest.fixture(scope="session")
def _session_topology(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TopologyCluster]:
    """Three Kafka nodes and a three-member ZooKeeper ensemble, for the whole session."""
    external = os.environ.get(TOPOLOGY_DIR_ENV)
    if external:
        cluster = TopologyCluster.existing(external, start_timeout=_TOPOLOGY_START_TIMEOUT_S)
        cluster.up()
        yield cluster
        return
    # The by-hand chaos plans' offset-expiry fault needs offsets of a group without Kafka
    # members to expire a minute after their last commit (tests/chaos/retention_fault.py).
    # Only then: every other test keeps Kafka's week, so that no check of a stopped group's
    # offsets (keyshared verify after a run) races their expiry.
    short = _offset_expiry_asked(request.config)
    cluster = TopologyCluster(
        tmp_path_factory.mktemp("keyshared-topology"),
        start_timeout=_TOPOLOGY_START_TIMEOUT_S,
        kafka_overrides={
            "offsets.retention.minutes": str(TOPOLOGY_OFFSET_RETENTION_MIN),
            "offsets.retention.check.interval.ms": "2000",
        }
        if short
        else None,
    )
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def topology_cluster(request: pytest.FixtureRequest) -> Iterator[TopologyCluster]:
    """The session's 3-broker / 3-ZooKeeper `TopologyCluster` (topics RF 3, min ISR 2).

    Tests may kill and restart any node; after the test every node runs again and every
    partition is back in sync.
    """
    cluster: TopologyCluster = request.getfixturevalue("_session_topology")
    yield cluster
    cluster.up()
    cluster.await_in_sync()


@pytest.fixture
def new_topic(kafka_bootstrap: str) -> Iterator[TopicFactory]:
    """Factory: `new_topic(partitions=3, config={...}) -> name`, ready when returned.

    The topics are deleted after the test (best effort).
    """
    yield from topic_factory(kafka_bootstrap)


@pytest.fixture
def new_group() -> GroupFactory:
    """Factory: `new_group(prefix="group") -> group id` no other test uses."""

    def make(prefix: str = "group") -> str:
        return unique_name(prefix)

    return make
