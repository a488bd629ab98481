"""`keyshared demo`: the main job on a local cluster."""

from __future__ import annotations

import click

__all__ = ["demo"]


@click.command()
def demo() -> None:
    """Run the keyed order-processing demo on a local Kafka (started if needed)."""
    click.echo("keyshared demo: not implemented yet")
