"""`keyshared demo`: the main job on a local cluster, with a summary that proves its promises."""

from __future__ import annotations

import logging
import time

import click
from rich.console import Console
from rich.logging import RichHandler

from keyshared.cli.options import bootstrap_servers_option, zookeeper_option
from keyshared.demo import DemoSettings, choose_cluster, print_summary, run_demo
from keyshared.demo.cluster import ClusterChoice
from keyshared.errors import KeySharedError

__all__ = ["demo"]


@click.command(context_settings={"show_default": True})
@bootstrap_servers_option(
    required=False,
    help="Kafka to use [env KEYSHARED_BOOTSTRAP_SERVERS; default: the local dev cluster in "
    "~/.cache/keyshared/dev, started if needed].",
)
@click.option("--records", type=click.IntRange(min=1), default=20_000, help="Orders to produce.")
@click.option(
    "--keys", type=click.IntRange(min=1), default=500, help="Customers (message keys); 3 are hot."
)
@click.option("--partitions", type=click.IntRange(min=1), default=6, help="Topic partitions.")
@click.option("--members", type=click.IntRange(min=1), default=2, help="Consumers in the group.")
@click.option("--workers", type=click.IntRange(min=1), default=32, help="Workers per member.")
@click.option(
    "--handler-ms", type=click.FloatRange(min=0), default=5.0, help="Simulated I/O per order."
)
@click.option(
    "--poison-every",
    type=click.IntRange(min=0),
    default=2_500,
    help="Every n-th order always fails and ends in the DLQ (0: none).",
)
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=300.0, help="Give up after seconds."
)
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=0, help="0: any free port.")
@click.option(
    "--keep-cluster/--stop-cluster",
    default=True,
    help="Leave a local cluster the demo started running (fast reruns, `keyshared dev down` "
    "stops it), or stop it at the end. A cluster that was already running, or given by -b, "
    "is never touched.",
)
@click.option(
    "--mode",
    type=click.Choice(["partition", "key_shared", "exclusive"]),
    default="partition",
    help="key_shared: the members split the topic's keys by slot through ZooKeeper, so more "
    "members than partitions all work (try --partitions 1 --members 4). exclusive: one active "
    "member holds a ZooKeeper lock, the others wait as standbys (no poison orders: exclusive "
    "mode blocks a poisoned key until it is released).",
)
@click.option(
    "--partition-leases",
    is_flag=True,
    help="partition mode: each partition runs only under its ZooKeeper lease, so a hand-over "
    "never overlaps the old owner's stragglers.",
)
@zookeeper_option(
    help="ZooKeeper for --mode key_shared [env KEYSHARED_ZOOKEEPER; default: the local one]."
)
@click.option(
    "--spark",
    "spark_replay",
    is_flag=True,
    help="Instead of the main job: park a key with the live consumer, replay the DLQ with "
    "Spark (keyshared.spark), resume in order. Needs keyshared[spark].",
)
def demo(
    bootstrap_servers: str | None,
    records: int,
    keys: int,
    partitions: int,
    members: int,
    workers: int,
    handler_ms: float,
    poison_every: int,
    timeout: float,
    metrics_port: int,
    keep_cluster: bool,
    mode: str,
    partition_leases: bool,
    zookeeper: str | None,
    spark_replay: bool,
) -> None:
    """Run a keyed order workload through keyshared and prove order and completeness.

    Produces ORDERS keyed by customer (each with a per-customer sequence number, a few hot
    customers, and poison orders whose card is always declined), consumes them with MEMBERS
    keyshared consumers of WORKERS threads each (handler: HANDLER-MS of simulated I/O, poison
    policy dead_letter), shows live progress, then a summary: throughput against a plain
    consumer, per-key order violations, records lost, duplicates, committed offsets and the
    DLQ's contents. Exits 1 if any order was lost or handled out of order.
    """
    console = Console(highlight=False)
    # keyshared logs (dead-lettering, rebalances) print above the live bars, not through them.
    logging.basicConfig(
        level=logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False, show_time=False)],
        force=True,
    )
    began = time.monotonic()
    try:
        where = choose_cluster(bootstrap_servers, zookeeper, console)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    if spark_replay:
        _spark_demo(where, console, keep_cluster)
        return
    settings = DemoSettings(
        records,
        keys,
        partitions,
        members,
        workers,
        handler_ms,
        0 if mode == "exclusive" else poison_every,
        timeout=timeout,
        metrics_port=metrics_port,
        mode=mode,
        zookeeper=where.zookeeper,
        partition_leases=partition_leases and mode == "partition",
    )
    try:
        outcome = run_demo(where.bootstrap, settings, console)
        print_summary(console, outcome)
        console.print(
            f"Demo finished in {time.monotonic() - began:.0f} s (cluster start included)."
        )
    except KeySharedError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        where.release(not keep_cluster, console)
    if not outcome.ok:
        raise SystemExit(1)


def _spark_demo(where: ClusterChoice, console: Console, keep_cluster: bool) -> None:
    """The ``--spark`` story (keyshared.demo.spark_replay); exits 1 if order was not kept."""
    from keyshared.demo.spark_replay import run_spark_replay_demo

    try:
        outcome = run_spark_replay_demo(where.bootstrap, console)
    except (KeySharedError, ImportError) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        where.release(not keep_cluster, console)
    if not outcome.ok:
        raise SystemExit(1)
