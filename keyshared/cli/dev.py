"""`keyshared dev`: run the local Kafka (KRaft) + ZooKeeper that development and tests use.

Human-readable progress goes to stderr and only `export KEY=value` lines go to stdout, so both
`eval "$(keyshared dev up)"` and `eval "$(keyshared dev env)"` set up the calling shell.
"""

from __future__ import annotations

import importlib.util
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from keyshared.dev import (
    RUNTIME_DIR_ENV,
    ClusterStatus,
    DevClusterError,
    LocalCluster,
    ServerStatus,
    fetch_jars,
    pinned_versions,
)
from keyshared.dev.cluster import DEFAULT_START_TIMEOUT_S
from keyshared.dev.topology import TopologyCluster, TopologyStatus, has_topology

__all__ = ["dev"]

_err = Console(stderr=True, highlight=False)
_F = TypeVar("_F", bound=Callable[..., Any])
_LABELS = {"kafka": "Kafka", "zookeeper": "ZooKeeper"}
_Cluster = LocalCluster | TopologyCluster


def _runtime_dir_option(func: _F) -> _F:
    option = click.option(
        "--runtime-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar=RUNTIME_DIR_ENV,
        default=None,
        help=f"Folder for state, data and logs [env {RUNTIME_DIR_ENV}; "
        "default ~/.cache/keyshared/dev].",
    )
    return option(func)


@click.group()
def dev() -> None:
    """Run a local single-node Kafka (KRaft) and ZooKeeper on 127.0.0.1.

    \b
    keyshared dev up        start both (or find them running), print the env
    eval "$(keyshared dev env)"   point this shell's keyshared commands at them
    keyshared dev down      stop both; data is kept for the next `up`
    """


@dev.command()
@_runtime_dir_option
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=DEFAULT_START_TIMEOUT_S,
    show_default=True,
    help="Seconds each server gets to answer.",
)
@click.option(
    "--brokers",
    type=click.IntRange(min=1),
    default=None,
    help="Kafka nodes (each broker and KRaft controller). More than 1: topics get RF "
    "min(N, 3) and min.insync.replicas one less. [default: 1, or what the folder holds]",
)
@click.option(
    "--zookeepers",
    type=click.IntRange(min=1),
    default=None,
    help="ZooKeeper ensemble members. [default: 1, or what the folder holds]",
)
def up(
    runtime_dir: Path | None, timeout: float, brokers: int | None, zookeepers: int | None
) -> None:
    """Start Kafka and ZooKeeper (if not running); print `export` lines for eval."""
    cluster = _cluster(runtime_dir, brokers, zookeepers, start_timeout=timeout)
    versions = pinned_versions()
    began = time.monotonic()
    with _err.status(
        f"Starting Kafka {versions.kafka} and ZooKeeper {versions.zookeeper} "
        f"in {cluster.runtime_dir} ..."
    ):
        status: ClusterStatus | TopologyStatus = _guarded(lambda: cluster.up())
    elapsed = time.monotonic() - began
    for server in _servers(status):
        how = f"started in {elapsed:.1f} s" if server.started else "already running"
        label = f"{_label(server.name)} {server.version}"
        _err.print(f"[green]✓[/] {label:<18} [bold]{server.address}[/]  pid {server.pid}  {how}")
    _err.print(f"  logs: {_servers(status)[0].log_file.parent}   stop: keyshared dev down")
    _err.print('  this shell: eval "$(keyshared dev env)"')
    _print_exports(status)


@dev.command()
@_runtime_dir_option
@click.option("--purge", is_flag=True, help="Also delete the data and logs (next up is cold).")
def down(runtime_dir: Path | None, purge: bool) -> None:
    """Stop the servers this folder's `up` started (SIGTERM, then SIGKILL)."""
    cluster = _cluster(runtime_dir)
    stopped: dict[str, int] = _guarded(lambda: cluster.down())
    if stopped:
        listed = ", ".join(f"{_label(name)} (pid {pid})" for name, pid in sorted(stopped.items()))
        _err.print(f"Stopped {listed}.")
    else:
        _err.print(f"Nothing was running in {cluster.runtime_dir}.")
    if purge:
        _guarded(cluster.purge)
        _err.print(f"Deleted the data and logs in {cluster.runtime_dir}.")


@dev.command()
@_runtime_dir_option
def env(runtime_dir: Path | None) -> None:
    """Print `export KEYSHARED_BOOTSTRAP_SERVERS=...` and `export KEYSHARED_ZOOKEEPER=...`."""
    for key, value in _guarded(_cluster(runtime_dir).env).items():
        click.echo(f"export {key}={shlex.quote(value)}")


@dev.command()
@_runtime_dir_option
def status(runtime_dir: Path | None) -> None:
    """Show each server's address, pid and whether it answers; exit 1 unless both do."""
    cluster = _cluster(runtime_dir)
    cluster_status: ClusterStatus | TopologyStatus = _guarded(lambda: cluster.status())
    roles = cluster_status.roles if isinstance(cluster_status, TopologyStatus) else {}
    table = Table(title=f"local cluster in {cluster_status.runtime_dir}", title_justify="left")
    for column in ("server", "version", "address", "pid", "state"):
        table.add_column(column)
    for server in _servers(cluster_status):
        role = f" ({roles[server.name]})" if server.name in roles else ""
        table.add_row(
            _label(server.name),
            server.version,
            server.address or "-",
            str(server.pid) if server.pid else "-",
            _state_label(server) + role,
        )
    _err.print(table)
    _err.print(f"logs: {_servers(cluster_status)[0].log_file.parent}")
    if not cluster_status.ready:
        raise SystemExit(1)


@dev.command()
def fetch() -> None:
    """Only download the Kafka and ZooKeeper jars into the cache (needs `mvn` once)."""
    versions = pinned_versions()
    with _err.status(f"Fetching Kafka {versions.kafka} and ZooKeeper {versions.zookeeper} ..."):
        jars_dir = _guarded(fetch_jars)
    count = sum(1 for _ in jars_dir.glob("*.jar"))
    _err.print(f"[green]✓[/] {count} jars in {jars_dir}")
    if importlib.util.find_spec("pyspark") is not None:
        # Spark's Kafka source must match the installed PySpark exactly: fetch it now too, so
        # the first Spark job (or test) does not stop to run Maven.
        from keyshared.dev.jars import fetch_spark_jars
        from keyshared.spark.jars import installed_spark

        version, scala = installed_spark()
        with _err.status(f"Fetching Spark {version}'s Kafka source ..."):
            spark_dir = _guarded(fetch_spark_jars, version, scala)
        _err.print(f"[green]✓[/] Spark's Kafka source in {spark_dir}")


@dev.command()
@click.option("--rebuild", is_flag=True, help="Build again even if the tag exists.")
def image(rebuild: bool) -> None:
    """Build the Kafka + ZooKeeper container image locally (no registry needed).

    \b
    Needs root, debootstrap, a Debian mirror and a Docker engine (DOCKER_HOST). The root file
    system is cached in ~/.cache/keyshared/images; see docs/local-cluster.md.
    """
    from keyshared.dev.image import ensure_image
    from keyshared.testing import docker_client

    client = docker_client()
    if client is None:
        raise click.ClickException(
            "no Docker engine answers (is DOCKER_HOST set, and the testcontainers extra "
            "installed: pip install 'keyshared[docker]'?)"
        )
    _guarded(fetch_jars)
    with _err.status("Building the image (debootstrap on first use, about a minute) ..."):
        build = _guarded(ensure_image, client, rebuild=rebuild)
    how = f"built in {build.seconds:.1f} s" if build.built else "already built"
    _err.print(f"[green]✓[/] {build.tag}  {how}")
    click.echo(build.tag)


def _cluster(
    runtime_dir: Path | None,
    brokers: int | None = None,
    zookeepers: int | None = None,
    *,
    start_timeout: float = DEFAULT_START_TIMEOUT_S,
) -> _Cluster:
    """The folder's cluster: a multi-node one if asked for or recorded there, else the
    single-node `LocalCluster`."""
    single = LocalCluster(runtime_dir, start_timeout=start_timeout)
    folder = single.runtime_dir
    if has_topology(folder):
        if brokers is None and zookeepers is None:
            return _guarded(TopologyCluster.existing, folder, start_timeout=start_timeout)
    elif (brokers or 1) == 1 and (zookeepers or 1) == 1:
        return single
    if single.state_file.is_file():
        raise click.ClickException(
            f"{folder} holds a single-node cluster; use another --runtime-dir for "
            f"--brokers {brokers or 1} --zookeepers {zookeepers or 1}"
        )
    return TopologyCluster(
        folder, brokers=brokers or 1, zookeepers=zookeepers or 1, start_timeout=start_timeout
    )


def _servers(status: ClusterStatus | TopologyStatus) -> list[ServerStatus]:
    if isinstance(status, TopologyStatus):
        return [*status.brokers, *status.zookeepers]
    return [status.kafka, status.zookeeper]


def _label(name: str) -> str:
    """``kafka`` -> ``Kafka``; ``zookeeper-2`` -> ``ZooKeeper 2``."""
    kind, _, node = name.partition("-")
    return f"{_LABELS[kind]} {node}".rstrip()


def _print_exports(status: ClusterStatus | TopologyStatus) -> None:
    """stdout gets only the eval-able lines, so `eval "$(keyshared dev up)"` works too."""
    for key, value in _guarded(status.env).items():
        click.echo(f"export {key}={shlex.quote(value)}")


def _state_label(server: ServerStatus) -> str:
    if server.answering:
        return "[green]answering[/]"
    if server.running:
        return "[yellow]running, not answering[/]"
    return "[red]stopped[/]"


_T = TypeVar("_T")


def _guarded(func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """Run `func`; a DevClusterError becomes a one-line `Error: ...` and exit status 1."""
    try:
        return func(*args, **kwargs)
    except DevClusterError as exc:
        raise click.ClickException(str(exc)) from exc
