"""`LocalCluster`: a real single-node Kafka (KRaft) and ZooKeeper on 127.0.0.1, run with `java`.

Everything lives in one *runtime folder* (default `~/.cache/keyshared/dev`, or `KEYSHARED_HOME`):

    cluster.json            ports and pids (see state.py)
    kafka/                  server.properties, log4j2.properties, data/ (the KRaft log dirs)
    zookeeper/              zoo.cfg, log4j2.properties, data/
    logs/                   kafka.log, zookeeper.log (server logs), *.out (JVM console)

The servers outlive the Python process that starts them (that is what `keyshared dev up` is
for), so every operation re-reads the state file and identifies its processes by pid *and*
command line (see process.py). A file lock on the folder serialises concurrent `up`/`down`.

This module only orchestrates; each part has its own module next to it: the runtime folder and
its lock (runtime.py), ports (ports.py), the state file (state.py), launching and awaiting a
server (launch.py), acting on both servers at once (parallel.py), stopping processes
(process.py) and the status every operation answers with (status.py).

Example::

    cluster = LocalCluster("/tmp/ks-dev")
    status = cluster.up()                  # starts both servers, or finds them running
    print(status.kafka.address)            # 127.0.0.1:<free port>
    cluster.stop_kafka()                   # e.g. to prove a guarantee across a broker restart
    cluster.start_kafka()                  # same port, same data
    cluster.down()
"""

from __future__ import annotations

import functools
import logging
import shutil
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from keyshared.dev import kafka, process, zookeeper
from keyshared.dev.errors import ClusterNotRunningError, ClusterStateError, DevClusterError
from keyshared.dev.jars import fetch_jars
from keyshared.dev.launch import DEFAULT_START_TIMEOUT_S, ServerLauncher
from keyshared.dev.parallel import combined_error, run_parallel
from keyshared.dev.ports import assign_ports, await_port_released
from keyshared.dev.runtime import RUNTIME_DIR_ENV, default_runtime_dir, folder_lock
from keyshared.dev.state import KAFKA, ZOOKEEPER, ClusterState, load_state, save_state
from keyshared.dev.status import (
    BOOTSTRAP_ENV,
    ZOOKEEPER_ENV,
    ClusterStatus,
    ServerStatus,
    probe_status,
)
from keyshared.dev.tools import find_java

__all__ = [
    "BOOTSTRAP_ENV",
    "DEFAULT_START_TIMEOUT_S",
    "DEFAULT_STOP_TIMEOUT_S",
    "RUNTIME_DIR_ENV",
    "ZOOKEEPER_ENV",
    "ClusterStatus",
    "LocalCluster",
    "ServerStatus",
    "default_runtime_dir",
]

log = logging.getLogger(__name__)

# Kafka's controlled shutdown of a single node takes a few seconds; past this, SIGKILL.
DEFAULT_STOP_TIMEOUT_S = 20.0


class LocalCluster:
    """A local Kafka broker (KRaft) and ZooKeeper server, both on free loopback ports.

    :param runtime_dir: the folder for state, configs, data and logs; default
        `default_runtime_dir()`. Two clusters in two folders run side by side.
    :param jar_cache: parent folder of the jar cache; default `jars.default_jar_cache()`.
    :param start_timeout: seconds each server gets to answer after its JVM starts.
    :param stop_timeout: seconds a server gets to shut down after SIGTERM before SIGKILL.
    :param kafka_heap_mb: the broker's `-Xmx`.
    :param zookeeper_heap_mb: the ZooKeeper server's `-Xmx`.
    :param kafka_overrides: extra server.properties entries, applied last.
    :param sasl_users: user -> password. When given, the broker's only client listener is
        SASL_PLAINTEXT with the PLAIN mechanism and these accounts (the first one is the
        broker's own, for inter-broker requests and probes); see :meth:`client_config`. For
        tests that prove security settings reach every client; ``keyshared dev`` stays
        PLAINTEXT.
    :param sasl_acls: with ``sasl_users``, also turn on Kafka's ACL authorizer, allowing
        whatever no ACL names (see `kafka.acl_settings`), so a test can deny a user something.
    """

    def __init__(
        self,
        runtime_dir: Path | str | None = None,
        *,
        jar_cache: Path | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT_S,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT_S,
        kafka_heap_mb: int = 768,
        zookeeper_heap_mb: int = 256,
        kafka_overrides: Mapping[str, str] | None = None,
        sasl_users: Mapping[str, str] | None = None,
        sasl_acls: bool = False,
    ) -> None:
        if sasl_users:
            kafka.sasl_settings(sasl_users, 0, 0)  # a bad name fails here, not in the JVM
        if sasl_acls:
            if not sasl_users:
                raise ValueError("sasl_acls needs sasl_users: ACLs name authenticated users")
            # The broker's own user comes first in sasl_users; overrides given win.
            kafka_overrides = {
                **kafka.acl_settings(next(iter(sasl_users))),
                **(kafka_overrides or {}),
            }
        self._sasl_users = dict(sasl_users or {})
        self.runtime_dir = Path(runtime_dir).expanduser() if runtime_dir else default_runtime_dir()
        self.runtime_dir = self.runtime_dir.absolute()
        self.state_file = self.runtime_dir / "cluster.json"
        self._jar_cache = jar_cache
        self._stop_timeout = stop_timeout
        self._kafka_files = kafka.kafka_files(self.runtime_dir)
        self._zk_files = zookeeper.zookeeper_files(self.runtime_dir)
        self._state_lock = threading.Lock()
        self._launcher = ServerLauncher(
            self._kafka_files,
            self._zk_files,
            save=self._save,
            jar_cache=jar_cache,
            start_timeout=start_timeout,
            kafka_heap_mb=kafka_heap_mb,
            zookeeper_heap_mb=zookeeper_heap_mb,
            kafka_overrides=kafka_overrides,
            sasl_users=sasl_users,
        )

    def __repr__(self) -> str:
        return f"LocalCluster({str(self.runtime_dir)!r})"

    # -- the whole cluster ------------------------------------------------------------------

    def up(self) -> ClusterStatus:
        """Start whatever is not running, in parallel, and return once both servers answer.

        Idempotent: servers already running are only checked. Ports of a previous run are
        reused when still free. On failure every server this call started is stopped again,
        and the error names the log file to read.

        :raises MissingToolError: `java` (or, for a first fetch, `mvn`) is missing.
        :raises StartupError: a server exited or did not answer within `start_timeout`.
        :raises ClusterStateError: the state file is corrupt (`down()` clears it).
        """
        with folder_lock(self.runtime_dir):
            state = load_state(self.state_file) or ClusterState()
            kafka_running = self._kafka_pid(state) is not None
            zk_running = self._zk_pid(state) is not None
            if not (kafka_running and zk_running):
                find_java()
                fetch_jars(self._jar_cache)
            assign_ports(state, kafka_running=kafka_running, zk_running=zk_running)
            self._save(state)
            abort = threading.Event()
            started: list[str] = []
            tasks: dict[str, Callable[[], None]] = {
                KAFKA: (lambda: self._launcher.await_kafka(state, abort))
                if kafka_running
                else (lambda: self._launcher.launch_kafka(state, abort, started)),
                ZOOKEEPER: (lambda: self._launcher.await_zookeeper(state, abort))
                if zk_running
                else (lambda: self._launcher.launch_zookeeper(state, abort, started)),
            }
            try:
                errors = run_parallel(tasks, abort)
            except BaseException:  # Ctrl-C: leave nothing half-started behind either
                self._stop_all(state, started)
                raise
            if errors:
                self._stop_all(state, started)
                raise combined_error(errors)
            return self._status(state, started=started, probe_timeout=None)

    def down(self) -> dict[str, int]:
        """Stop both servers (SIGTERM, SIGKILL after `stop_timeout`); return name -> pid stopped.

        Idempotent. Ports stay recorded so the next `up` comes back on the same addresses.
        Processes of this folder that the state file does not know (a corrupt file, a start
        interrupted before its pid was saved) are found by command line and stopped too.
        """
        with folder_lock(self.runtime_dir):
            try:
                state = load_state(self.state_file)
            except ClusterStateError:
                log.warning("unreadable %s; stopping servers by command line", self.state_file)
                state = None
                self.state_file.unlink()
            stopped: dict[str, int] = {}
            if state is not None:
                tasks: dict[str, Callable[[], None]] = {
                    name: functools.partial(self._stop_into, state, name, stopped)
                    for name in (KAFKA, ZOOKEEPER)
                }
                errors = run_parallel(tasks, threading.Event())
                if errors:
                    raise combined_error(errors)
            for name, marker in (
                (KAFKA, self._kafka_files.marker),
                (ZOOKEEPER, self._zk_files.marker),
            ):
                for pid in process.find_processes(marker):
                    log.warning("stopping stray %s pid %d of %s", name, pid, self.runtime_dir)
                    process.stop(pid, marker, self._stop_timeout)
                    stopped.setdefault(name, pid)
            return stopped

    def status(self, probe_timeout: float = 2.0) -> ClusterStatus:
        """Each server's address, pid and whether it answers its probe right now."""
        state = load_state(self.state_file) or ClusterState()
        return self._status(state, started=[], probe_timeout=probe_timeout)

    def env(self) -> dict[str, str]:
        """`{KEYSHARED_BOOTSTRAP_SERVERS: ..., KEYSHARED_ZOOKEEPER: ...}` of the running cluster.

        :raises ClusterNotRunningError: either server is not running.
        """
        state = load_state(self.state_file) or ClusterState()
        return self._status(state, started=[], probe_timeout=None).env()

    @property
    def bootstrap_servers(self) -> str:
        """`127.0.0.1:port` of the running broker."""
        return self.env()[BOOTSTRAP_ENV]

    def client_config(self, user: str | None = None) -> dict[str, str]:
        """librdkafka properties for a client of the running broker: `bootstrap.servers`, and
        with SASL on, the credentials of `user` (default: the first account).

        :raises KeyError: `user` is not one of the `sasl_users`.
        :raises ClusterNotRunningError: the cluster is not running.
        """
        config = {"bootstrap.servers": self.bootstrap_servers}
        if self._sasl_users:
            name = user if user is not None else next(iter(self._sasl_users))
            config.update(kafka.sasl_client_config(name, self._sasl_users[name]))
        return config

    @property
    def zookeeper_hosts(self) -> str:
        """`127.0.0.1:port` of the running ZooKeeper server."""
        return self.env()[ZOOKEEPER_ENV]

    def purge(self) -> None:
        """Delete the cluster's data, logs and state (the next `up` is a cold start).

        Only the folder's known entries are removed, never the folder itself, in case
        `KEYSHARED_HOME` points somewhere shared.

        :raises DevClusterError: a server is still running.
        """
        with folder_lock(self.runtime_dir):
            state = load_state(self.state_file)
            if state is not None and (self._kafka_pid(state) or self._zk_pid(state)):
                raise DevClusterError(
                    f"the cluster in {self.runtime_dir} is running; stop it first"
                )
            for entry in (
                self._kafka_files.home,
                self._zk_files.home,
                self._kafka_files.log_file.parent,
            ):
                shutil.rmtree(entry, ignore_errors=True)
            self.state_file.unlink(missing_ok=True)

    # -- one server at a time (for tests of restarts and crashes) ---------------------------

    def stop_kafka(self, *, kill: bool = False) -> None:
        """Stop the broker, keeping its ports and data; `kill=True` sends SIGKILL (a crash)."""
        self._stop_one(KAFKA, kill=kill)

    def start_kafka(self) -> None:
        """Start the broker again on the same ports with the same data; return when it answers.

        :raises PortInUseError: another process took one of its ports meanwhile.
        """
        self._start_one(KAFKA)

    def stop_zookeeper(self, *, kill: bool = False) -> None:
        """Stop ZooKeeper, keeping its port and data; `kill=True` sends SIGKILL (a crash)."""
        self._stop_one(ZOOKEEPER, kill=kill)

    def start_zookeeper(self) -> None:
        """Start ZooKeeper again on the same port with the same data; return when it answers.

        :raises PortInUseError: another process took its port meanwhile.
        """
        self._start_one(ZOOKEEPER)

    # -- internals --------------------------------------------------------------------------

    def _save(self, state: ClusterState) -> None:
        with self._state_lock:
            save_state(self.state_file, state)

    def _kafka_pid(self, state: ClusterState) -> int | None:
        pid = state.kafka.pid if state.kafka else None
        return pid if pid and process.is_running(pid, self._kafka_files.marker) else None

    def _zk_pid(self, state: ClusterState) -> int | None:
        pid = state.zookeeper.pid if state.zookeeper else None
        return pid if pid and process.is_running(pid, self._zk_files.marker) else None

    def _stop_all(self, state: ClusterState, names: list[str]) -> None:
        for name in list(names):
            self._stop(state, name, kill=False)

    def _stop_into(self, state: ClusterState, name: str, stopped: dict[str, int]) -> None:
        pid = self._stop(state, name, kill=False)
        if pid is not None:
            stopped[name] = pid

    def _stop(self, state: ClusterState, name: str, *, kill: bool) -> int | None:
        """Stop one server of `state` if it runs; record that it is stopped; return its pid."""
        record = state.kafka if name == KAFKA else state.zookeeper
        marker = self._kafka_files.marker if name == KAFKA else self._zk_files.marker
        if record is None or record.pid is None:
            return None
        pid = record.pid
        stopped = process.stop(pid, marker, self._stop_timeout, kill=kill)
        record.pid = None
        self._save(state)
        if stopped:
            log.info("stopped %s pid %d%s", name, pid, " (SIGKILL)" if kill else "")
        return pid if stopped else None

    def _stop_one(self, name: str, *, kill: bool) -> None:
        with folder_lock(self.runtime_dir):
            state = load_state(self.state_file)
            if state is None:
                raise ClusterNotRunningError(f"no local cluster was started in {self.runtime_dir}")
            self._stop(state, name, kill=kill)

    def _start_one(self, name: str) -> None:
        with folder_lock(self.runtime_dir):
            state = load_state(self.state_file)
            record = (state.kafka if name == KAFKA else state.zookeeper) if state else None
            if state is None or record is None:
                raise ClusterNotRunningError(
                    f"{name} was never started in {self.runtime_dir}; use up() first"
                )
            if (self._kafka_pid(state) if name == KAFKA else self._zk_pid(state)) is not None:
                return
            record.pid = None
            ports = (
                (state.kafka.port, state.kafka.controller_port)
                if name == KAFKA and state.kafka
                else (record.port,)
            )
            for port in ports:
                await_port_released(name, port)
            started: list[str] = []
            launcher = self._launcher
            launch = launcher.launch_kafka if name == KAFKA else launcher.launch_zookeeper
            try:
                launch(state, threading.Event(), started)
            except BaseException:
                if started:
                    self._stop(state, name, kill=False)
                raise

    def _status(
        self, state: ClusterState, *, started: list[str], probe_timeout: float | None
    ) -> ClusterStatus:
        """Build a status; `probe_timeout=None` trusts the caller that running means answering."""
        return probe_status(
            self.runtime_dir,
            state,
            kafka_pid=self._kafka_pid(state),
            zookeeper_pid=self._zk_pid(state),
            kafka_log=self._kafka_files.log_file,
            zookeeper_log=self._zk_files.log_file,
            started=started,
            probe_timeout=probe_timeout,
            kafka_client_config=self._launcher.probe_config,
        )
