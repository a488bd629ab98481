"""Launch a server's JVM and wait until it answers its protocol, or fail with its log's tail.

A started JVM is not a usable server: Kafka needs seconds to format its storage, elect itself
controller and open its listener. So each launch writes the config, spawns the process, records
its pid at once (so `down` can stop it even if this process dies while waiting), then polls the
server's own protocol probe. The wait fails fast when the process exits, and every failure
quotes the last lines of the server's log, where the reason is.

Example::

    launcher = ServerLauncher(kafka_files, zookeeper_files, save=save, jar_cache=None,
                              start_timeout=60.0, kafka_heap_mb=768, zookeeper_heap_mb=256)
    started: list[str] = []
    launcher.launch_kafka(state, threading.Event(), started)   # returns once Kafka answers
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from keyshared.dev import kafka, process, zookeeper
from keyshared.dev.errors import StartupError
from keyshared.dev.jars import fetch_jars
from keyshared.dev.ports import LOOPBACK
from keyshared.dev.state import KAFKA, ZOOKEEPER, ClusterState
from keyshared.dev.tools import find_java

__all__ = ["DEFAULT_START_TIMEOUT_S", "ServerLauncher", "await_answer"]

log = logging.getLogger(__name__)

# A cold start (format + JVM warm-up) takes ~10 s on two cores; 60 s leaves room for a loaded
# CI runner without letting a broken start hang a test session.
DEFAULT_START_TIMEOUT_S = 60.0
_PROBE_INTERVAL_S = 0.2
_LOG_TAIL_LINES = 15


class ServerLauncher:
    """Starts the broker and the ZooKeeper server of one runtime folder, and awaits them.

    `LocalCluster` owns the settings (and their defaults); this class only applies them.

    :param kafka_files: the broker's config, data and log paths.
    :param zookeeper_files: the ZooKeeper server's config, data and log paths.
    :param save: writes the state file; called as soon as a pid is known.
    :param jar_cache: parent folder of the jar cache; default `jars.default_jar_cache()`.
    :param start_timeout: seconds each server gets to answer after its JVM starts.
    :param kafka_heap_mb: the broker's `-Xmx`.
    :param zookeeper_heap_mb: the ZooKeeper server's `-Xmx`.
    :param kafka_overrides: extra server.properties entries, applied last.
    :param sasl_users: user -> password: the broker's client listener requires SASL/PLAIN
        (see `kafka.sasl_settings`); the first user is the broker's own and the probe's.
    """

    def __init__(
        self,
        kafka_files: kafka.KafkaFiles,
        zookeeper_files: zookeeper.ZooKeeperFiles,
        *,
        save: Callable[[ClusterState], None],
        jar_cache: Path | None,
        start_timeout: float,
        kafka_heap_mb: int,
        zookeeper_heap_mb: int,
        kafka_overrides: Mapping[str, str] | None = None,
        sasl_users: Mapping[str, str] | None = None,
    ) -> None:
        self._kafka_files = kafka_files
        self._zk_files = zookeeper_files
        self._save = save
        self._jar_cache = jar_cache
        self._start_timeout = start_timeout
        self._kafka_heap_mb = kafka_heap_mb
        self._zookeeper_heap_mb = zookeeper_heap_mb
        self._kafka_overrides = dict(kafka_overrides or {})
        self._sasl_users = dict(sasl_users or {})

    @property
    def probe_config(self) -> dict[str, str]:
        """Client properties the readiness probe needs: SASL credentials when SASL is on."""
        if not self._sasl_users:
            return {}
        user, password = next(iter(self._sasl_users.items()))
        return kafka.sasl_client_config(user, password)

    def launch_kafka(self, state: ClusterState, abort: threading.Event, started: list[str]) -> None:
        """Write the config, format storage on first use, start the broker, await it.

        Appends `"kafka"` to `started` once the process exists (so the caller stops it again
        if anything later fails).
        """
        record = state.kafka
        assert record is not None
        files = self._kafka_files
        java, jars = find_java(), fetch_jars(self._jar_cache)
        kafka.write_config(
            files, record.port, record.controller_port, self._kafka_overrides, self._sasl_users
        )
        if not kafka.is_formatted(files):
            log.info("formatting KRaft storage in %s", files.data)
            kafka.format_storage(java, jars, files)
        if abort.is_set():
            return
        command = kafka.server_command(java, jars, files, self._kafka_heap_mb)
        record.pid = process.spawn(command, files.console_file, files.home)
        started.append(KAFKA)
        self._save(state)
        log.info("started kafka pid %d on %s:%d", record.pid, LOOPBACK, record.port)
        self.await_kafka(state, abort)

    def launch_zookeeper(
        self, state: ClusterState, abort: threading.Event, started: list[str]
    ) -> None:
        """Write the config, start the ZooKeeper server, await it; see `launch_kafka`."""
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
        self.await_zookeeper(state, abort)

    def await_kafka(self, state: ClusterState, abort: threading.Event) -> None:
        """Return once the recorded broker answers a metadata request."""
        record = state.kafka
        assert record is not None and record.pid is not None
        address = f"{LOOPBACK}:{record.port}"
        await_answer(
            "Kafka",
            record.pid,
            self._kafka_files.marker,
            lambda: kafka.answers_metadata(
                address, record.port, timeout=2.0, client_config=self.probe_config
            ),
            (self._kafka_files.log_file, self._kafka_files.console_file),
            abort,
            self._start_timeout,
        )

    def await_zookeeper(self, state: ClusterState, abort: threading.Event) -> None:
        """Return once the recorded ZooKeeper server answers `ruok`."""
        record = state.zookeeper
        assert record is not None and record.pid is not None
        await_answer(
            "ZooKeeper",
            record.pid,
            self._zk_files.marker,
            lambda: zookeeper.answers_ruok(record.port),
            (self._zk_files.log_file, self._zk_files.console_file),
            abort,
            self._start_timeout,
        )


def await_answer(
    name: str,
    pid: int,
    marker: str,
    probe: Callable[[], bool],
    logs: tuple[Path, Path],
    abort: threading.Event,
    timeout: float,
) -> None:
    """Poll `probe` until it succeeds; fail fast if the process exits or `abort` is set.

    :param logs: the server's own log and its JVM console file, quoted on failure.
    :raises StartupError: the process exited, or did not answer within `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
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
                f"{name} (pid {pid}) did not answer within {timeout:.0f} s; "
                f"see {log_file}{_tail(console_file, log_file)}",
                log_file,
            )
        abort.wait(_PROBE_INTERVAL_S)


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
