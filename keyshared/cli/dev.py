"""`keyshared dev`: the local Kafka + ZooKeeper (placeholder until the launcher lands)."""

from __future__ import annotations

import click

__all__ = ["dev"]


@click.group()
def dev() -> None:
    """Run a local single-node Kafka (KRaft) and ZooKeeper on 127.0.0.1."""
