"""`keyshared bench`: named benchmark scenarios against the real broker (placeholder)."""

from __future__ import annotations

import click

__all__ = ["bench"]


@click.command()
def bench() -> None:
    """Run benchmark scenarios with baselines measured in the same run."""
    raise click.ClickException("keyshared bench: not implemented yet")
