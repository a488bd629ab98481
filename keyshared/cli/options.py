"""Option parsers shared by several commands, so each is written (and errs) one way."""

from __future__ import annotations

import click

__all__ = ["zookeeper_auth"]


def zookeeper_auth(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[str, str] | None:
    """``USER:PASSWORD`` for ZooKeeper digest auth, or None."""
    if value is None:
        return None
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        raise click.BadParameter("expected USER:PASSWORD")
    return user, password
