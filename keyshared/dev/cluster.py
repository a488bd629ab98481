"""`LocalCluster`: a real single-node Kafka (KRaft) and ZooKeeper on 127.0.0.1, run with `java`.

Everything lives in one *runtime folder* (default `~/.cache/keyshared/dev`, or `KEYSHARED_HOME`):

    cluster.json            ports and pids (see state.py)
    kafka/                  server.properties, log4j2.properties, data/ (the KRaft log dirs)
    zookeeper/              zoo.cfg, log4j2.properties, data/
    logs/                   kafka.log, zookeeper.log (server logs), *.out (JVM console)

The servers outlive the Python process that starts them (that is what `keyshared dev up` is
for), so every operation re-reads the state file and identifies its processes by pid *and*
command line (see process.py). A file lock on the folder serialises concurrent `up`/`down`.

Example::

    cluster = LocalCluster("/tmp/ks-dev")
    status = cluster.up()                  # starts both servers, or finds them running
    print(status.kafka.address)            # 127.0.0.1:<free port>
    cluster.stop_kafka()                   # e.g. to prove a guarantee across a broker restart
    cluster.start_kafka()                  # same port, same data
    cluster.down()
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from keyshared.dev import kafka, process, zookeeper
from keyshared.dev.errors import (
    ClusterNotRunningError,
    ClusterStateError,
    DevClusterError,
    PortInUseError,
    StartupError,
)
from keyshared.dev.jars import fetch_jars, pinned_versions
from keyshared.dev.ports import LOOPBACK, free_ports, port_is_free
from keyshared.dev.state import (
    ClusterState,
    KafkaRecord,
    ZooKeeperRecord,
    load_state,
    save_state,
)
from keyshared.dev.tools import find_java

__all__ = [
    "BOOTSTRAP_ENV",
    "RUNTIME_DIR_ENV",
    "ZOOKEEPER_ENV",
    "ClusterStatus",
    "LocalCluster",
    "ServerStatus",
    "default_runtime_dir",
]

log = logging.getLogger(__name__)

RUNTIME_DIR_ENV = "KEYSHARED_HOME"
BOOTSTRAP_ENV = "KEYSHARED_BOOTSTRAP_SERVERS"
ZOOKEEPER_ENV = "KEYSHARED_ZOOKEEPER"

KAFKA = "kafka"
ZOOKEEPER = "zookeeper"

# A cold start (format + JVM warm-up) takes ~10 s on two cores; 60 s leaves room for a loaded
# CI runner without letting a broken start hang a test session.
DEFAULT_START_TIMEOUT_S = 60.0
# How long a restart waits for a killed server's port to be released by the kernel.
_PORT_RELEASE_TIMEOUT_S = 60.0
# Kafka's controlled shutdown of a single node takes a few seconds; past this, SIGKILL.
DEFAULT_STOP_TIMEOUT_S = 20.0
_PROBE_INTERVAL_S = 0.2
_LOG_TAIL_LINES = 15


def default_runtime_dir() -> Path:
    """`$KEYSHARED_HOME`, else `$XDG_CACHE_HOME/keyshared/dev`, else `~/.cache/keyshared/dev`."""
    override = os.environ.get(RUNTIME_DIR_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "keyshared" / "dev"


@dataclass(frozen=True)
class ServerStatus:
    """One server as seen now.

    :ivar address: `127.0.0.1:port`, or None if the server was never started in this folder.
    :ivar pid: the server's pid while it runs, else None.
    :ivar answering: it answered its protocol probe (metadata for Kafka, `ruok` for ZooKeeper).
    :ivar started: the call that returned this status started it (False: it was running).
    """

    name: str
    version: str
    address: str | None
    pid: int | None
    answering: bool
    started: bool
    log_file: Path

    @property
    def running(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True)
class ClusterStatus:
    """Both servers, and the environment that points clients at them."""

    runtime_dir: Path
    kafka: ServerStatus
    zookeeper: ServerStatus

    @property
    def ready(self) -> bool:
        return self.kafka.answering and self.zookeeper.answering

    def env(self) -> dict[str, str]:
        """`KEYSHARED_BOOTSTRAP_SERVERS` and `KEYSHARED_ZOOKEEPER` for the running servers."""
        if not (self.kafka.running and self.zookeeper.running):
            raise ClusterNotRunningError(
                f"no local cluster is running in {self.runtime_dir}; start it with "
                "`keyshared dev up`"
            )
        assert self.kafka.address is not None and self.zookeeper.address is not None
        return {BOOTSTRAP_ENV: self.kafka.address, ZOOKEEPER_ENV: self.zookeeper.address}


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
    ) -> None:
        self.runtime_dir = Path(runtime_dir).expanduser() if runtime_dir else default_runtime_dir()
        self.runtime_dir = self.runtime_dir.absolute()
        self.state_file = self.runtime_dir / "cluster.json"
        self._jar_cache = jar_cache
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._kafka_heap_mb = kafka_heap_mb
        self._zookeeper_heap_mb = zookeeper_heap_mb
        self._kafka_overrides = dict(kafka_overrides or {})
        self._kafka_files = kafka.KafkaFiles.in_runtime(self.runtime_dir)
        self._zk_files = zookeeper.ZooKeeperFiles.in_runtime(self.runtime_dir)
        self._state_lock = threading.Lock()

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
        with self._folder_lock():
            state = load_state(self.state_file) or ClusterState()
            kafka_running = self._kafka_pid(state) is not None
            zk_running = self._zk_pid(state) is not None
            if not (kafka_running and zk_running):
                find_java()
                fetch_jars(self._jar_cache)
            self._assign_ports(state, kafka_running=kafka_running, zk_running=zk_running)
            self._save(state)
            abort = threading.Event()
            started: list[str] = []
            tasks: dict[str, Callable[[], None]] = {
                KAFKA: (lambda: self._await_kafka(state, abort))
                if kafka_running
                else (lambda: self._launch_kafka(state, abort, started)),
                ZOOKEEPER: (lambda: self._await_zookeeper(state, abort))
                if zk_running
                else (lambda: self._launch_zookeeper(state, abort, started)),
            }
            try:
                errors = self._run_parallel(tasks, abort)
            except BaseException:  # Ctrl-C: leave nothing half-started behind either
                self._stop_all(state, started)
                raise
            if errors:
                self._stop_all(state, started)
                raise _combined(errors)
            return self._status(state, started=started, probe_timeout=None)

    def down(self) -> dict[str, int]:
        """Stop both servers (SIGTERM, SIGKILL after `stop_timeout`); return name -> pid stopped.

        Idempotent. Ports stay recorded so the next `up` comes back on the same addresses.
        Processes of this folder that the state file does not know (a corrupt file, a start
        interrupted before its pid was saved) are found by command line and stopped too.
        """
        with self._folder_lock():
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
                errors = self._run_parallel(tasks, threading.Event())
                if errors:
                    raise _combined(errors)
            for name, marker in ((KAFKA, self._kafka_files.marker), (ZOOKEEPER, self._zk_marker)):
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
        with self._folder_lock():
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

    @property
    def _zk_marker(self) -> str:
        return self._zk_files.marker

    @contextlib.contextmanager
    def _folder_lock(self) -> Iterator[None]:
        """An exclusive lock on the runtime folder, across processes and threads."""
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        with (self.runtime_dir / ".lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _save(self, state: ClusterState) -> None:
        with self._state_lock:
            save_state(self.state_file, state)

    def _kafka_pid(self, state: ClusterState) -> int | None:
        pid = state.kafka.pid if state.kafka else None
        return pid if pid and process.is_running(pid, self._kafka_files.marker) else None

    def _zk_pid(self, state: ClusterState) -> int | None:
        pid = state.zookeeper.pid if state.zookeeper else None
        return pid if pid and process.is_running(pid, self._zk_marker) else None

    def _assign_ports(self, state: ClusterState, *, kafka_running: bool, zk_running: bool) -> None:
        """Keep recorded ports that are still free; pick new free ports for the rest."""
        reusable_kafka = state.kafka is not None and (
            kafka_running
            or (port_is_free(state.kafka.port) and port_is_free(state.kafka.controller_port))
        )
        reusable_zk = state.zookeeper is not None and (
            zk_running or port_is_free(state.zookeeper.port)
        )
        taken = {
            *((state.kafka.port, state.kafka.controller_port) if state.kafka else ()),
            *((state.zookeeper.port,) if state.zookeeper else ()),
        }
        fresh = iter(port for port in free_ports(6) if port not in taken)
        if not reusable_kafka:
            if state.kafka is not None:
                log.info("kafka's previous ports are taken; moving to new ones")
            state.kafka = KafkaRecord(port=next(fresh), controller_port=next(fresh))
        if not reusable_zk:
            if state.zookeeper is not None:
                log.info("zookeeper's previous port is taken; moving to a new one")
            state.zookeeper = ZooKeeperRecord(port=next(fresh))
        if not kafka_running:
            assert state.kafka is not None
            state.kafka.pid = None
        if not zk_running:
            assert state.zookeeper is not None
            state.zookeeper.pid = None

    def _launch_kafka(
        self, state: ClusterState, abort: threading.Event, started: list[str]
    ) -> None:
        record = state.kafka
        assert record is not None
        files = self._kafka_files
        java, jars = find_java(), fetch_jars(self._jar_cache)
        kafka.write_config(files, record.port, record.controller_port, self._kafka_overrides)
        if not files.formatted:
            log.info("formatting KRaft storage in %s", files.data)
            kafka.format_storage(java, jars, files)
        if abort.is_set():
            return
        command = kafka.server_command(java, jars, files, self._kafka_heap_mb)
        record.pid = process.spawn(command, files.console_file, files.home)
        started.append(KAFKA)
        self._save(state)
        log.info("started kafka pid %d on %s:%d", record.pid, LOOPBACK, record.port)
        self._await_kafka(state, abort)

    def _launch_zookeeper(
        self, state: ClusterState, abort: threading.Event, started: list[str]
    ) -> None:
        record = state.zookeeper
        assert record is not None
        files = self._zk_files
        java, jars = find_java(), fetch_jars(self._jar_cache)
        zookeeper.write_config(files, record.port)
        command = zookeeper.server_command(java, jars, files, self._zookeeper_heap_mb)
        record.pid = process.spawn(command, files.console_file, files.home)
        started.append(ZOOKEEPER)
        self._save(state)
        log.info("started zookeeper pid %d on %s:%d", record.pid, LOOPBACK, record.port)
        self._await_zookeeper(state, abort)

    def _await_kafka(self, state: ClusterState, abort: threading.Event) -> None:
        record = state.kafka
        assert record is not None and record.pid is not None
        address = f"{LOOPBACK}:{record.port}"
        self._await(
            "Kafka",
            record.pid,
            self._kafka_files.marker,
            lambda: kafka.answers_metadata(address, record.port, timeout=2.0),
            (self._kafka_files.log_file, self._kafka_files.console_file),
            abort,
        )

    def _await_zookeeper(self, state: ClusterState, abort: threading.Event) -> None:
        record = state.zookeeper
        assert record is not None and record.pid is not None
        self._await(
            "ZooKeeper",
            record.pid,
            self._zk_marker,
            lambda: zookeeper.answers_ruok(record.port),
            (self._zk_files.log_file, self._zk_files.console_file),
            abort,
        )

    def _await(
        self,
        name: str,
        pid: int,
        marker: str,
        probe: Callable[[], bool],
        logs: tuple[Path, Path],
        abort: threading.Event,
    ) -> None:
        """Poll `probe` until it succeeds; fail fast if the process exits or `abort` is set."""
        deadline = time.monotonic() + self._start_timeout
        log_file, console_file = logs
        while not abort.is_set():
            if not process.is_running(pid, marker):
                raise StartupError(
                    f"{name} (pid {pid}) exited during startup; see {log_file}"
                    f"{_tail(console_file, log_file)}",
                    log_file,
                )
            if probe():
                return
            if time.monotonic() > deadline:
                raise StartupError(
                    f"{name} (pid {pid}) did not answer within {self._start_timeout:.0f} s; "
                    f"see {log_file}{_tail(console_file, log_file)}",
                    log_file,
                )
            abort.wait(_PROBE_INTERVAL_S)

    def _run_parallel(
        self, tasks: Mapping[str, Callable[[], None]], abort: threading.Event
    ) -> list[BaseException]:
        """Run one task per server in parallel; the first failure aborts the others' waits."""

        def guarded(task: Callable[[], None]) -> None:
            try:
                task()
            except BaseException:
                abort.set()
                raise

        pool = ThreadPoolExecutor(max_workers=len(tasks), thread_name_prefix="keyshared-dev")
        futures = [pool.submit(guarded, task) for task in tasks.values()]
        try:
            wait(futures)
        except BaseException:
            abort.set()  # interrupted: the tasks stop waiting, then the caller cleans up
            wait(futures)
            raise
        finally:
            pool.shutdown(wait=True)
        return [exc for future in futures if (exc := future.exception()) is not None]

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
        marker = self._kafka_files.marker if name == KAFKA else self._zk_marker
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
        with self._folder_lock():
            state = load_state(self.state_file)
            if state is None:
                raise ClusterNotRunningError(f"no local cluster was started in {self.runtime_dir}")
            self._stop(state, name, kill=kill)

    def _start_one(self, name: str) -> None:
        with self._folder_lock():
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
                # After a SIGKILL the dead server's orphaned connections hold its port for a
                # moment (FIN_WAIT); wait that out instead of failing the restart.
                deadline = time.monotonic() + _PORT_RELEASE_TIMEOUT_S
                while not port_is_free(port):
                    if time.monotonic() > deadline:
                        raise PortInUseError(name, port)
                    time.sleep(0.2)
            started: list[str] = []
            launch = self._launch_kafka if name == KAFKA else self._launch_zookeeper
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
        versions = pinned_versions()
        kafka_pid, zk_pid = self._kafka_pid(state), self._zk_pid(state)
        kafka_address = f"{LOOPBACK}:{state.kafka.port}" if state.kafka else None
        zk_address = f"{LOOPBACK}:{state.zookeeper.port}" if state.zookeeper else None
        if probe_timeout is None:
            kafka_answers, zk_answers = kafka_pid is not None, zk_pid is not None
        else:
            kafka_answers = bool(
                kafka_pid
                and state.kafka
                and kafka.answers_metadata(kafka_address or "", state.kafka.port, probe_timeout)
            )
            zk_answers = bool(
                zk_pid
                and state.zookeeper
                and zookeeper.answers_ruok(state.zookeeper.port, probe_timeout)
            )
        return ClusterStatus(
            runtime_dir=self.runtime_dir,
            kafka=ServerStatus(
                name=KAFKA,
                version=versions.kafka,
                address=kafka_address,
                pid=kafka_pid,
                answering=kafka_answers,
                started=KAFKA in started,
                log_file=self._kafka_files.log_file,
            ),
            zookeeper=ServerStatus(
                name=ZOOKEEPER,
                version=versions.zookeeper,
                address=zk_address,
                pid=zk_pid,
                answering=zk_answers,
                started=ZOOKEEPER in started,
                log_file=self._zk_files.log_file,
            ),
        )


def _tail(*paths: Path) -> str:
    """The last lines of the first non-empty file, indented, for an error message."""
    for path in paths:
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        if lines:
            shown = "\n".join(f"    {line}" for line in lines[-_LOG_TAIL_LINES:])
            return f"\n  last lines of {path}:\n{shown}"
    return ""


def _combined(errors: list[BaseException]) -> BaseException:
    """One exception for one or two failed servers (a DevClusterError keeps its type)."""
    if len(errors) == 1:
        return errors[0]
    first = errors[0]
    message = "\n".join(str(error) for error in errors)
    if isinstance(first, StartupError):
        return StartupError(message, first.log_file)
    return DevClusterError(message) if isinstance(first, DevClusterError) else first
