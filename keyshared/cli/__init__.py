"""The `keyshared` command line: one module per command group, gathered here.

Every command reads `KEYSHARED_BOOTSTRAP_SERVERS` and `KEYSHARED_ZOOKEEPER` as defaults so that
`eval "$(keyshared dev env)"` is all the setup a shell needs.
"""

from __future__ import annotations

import click

from keyshared.cli.assign import assign
from keyshared.cli.bench import bench
from keyshared.cli.demo import demo
from keyshared.cli.dev import dev
from keyshared.cli.dlq import dlq
from keyshared.cli.release import release
from keyshared.cli.reprocess import reprocess
from keyshared.cli.reset import reset
from keyshared.cli.run import run
from keyshared.cli.status import status
from keyshared.cli.verify import verify

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="keyshared")
def cli() -> None:
    """Per-key parallel Kafka consumption: order per key, safe commits, DLQs."""


cli.add_command(run)
cli.add_command(dev)
cli.add_command(demo)
cli.add_command(bench)
cli.add_command(release)
cli.add_command(status)
cli.add_command(verify)
cli.add_command(assign)
cli.add_command(dlq)
cli.add_command(reprocess)
cli.add_command(reset)


def main() -> None:
    cli(auto_envvar_prefix="KEYSHARED")
