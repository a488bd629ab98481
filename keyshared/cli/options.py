"""Options and option parsers shared by several commands, so each is written (and errs) one way.

Each ``*_option`` returns a click decorator. What commands share is fixed here (the flag names,
the environment variable, the type); what they say about it may differ, so the help text is a
parameter where the commands word it differently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from coordinator.layout import DEFAULT_NAMESPACE
from keyshared.ops import GroupReader
from keyshared.ops.collect import DEFAULT_DLQ_TOPIC

__all__ = [
    "CommandError",
    "bootstrap_servers_option",
    "broker_options",
    "client_properties_option",
    "group_option",
    "namespace_option",
    "parse_properties",
    "reader_for",
    "timeout_option",
    "topic_option",
    "zookeeper_auth",
    "zookeeper_auth_option",
    "zookeeper_option",
]

F = TypeVar("F", bound=Callable[..., Any])

BOOTSTRAP_SERVERS_HELP = "Kafka bootstrap servers (default: $KEYSHARED_BOOTSTRAP_SERVERS)."
CLIENT_PROPERTIES_HELP = "Extra client property, e.g. for security (repeatable)."


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


def bootstrap_servers_option(
    *, required: bool = True, help: str = BOOTSTRAP_SERVERS_HELP
) -> Callable[[F], F]:
    """``--bootstrap-servers`` / ``-b``, from ``$KEYSHARED_BOOTSTRAP_SERVERS`` if not given."""
    return click.option(
        "--bootstrap-servers",
        "-b",
        envvar="KEYSHARED_BOOTSTRAP_SERVERS",
        required=required,
        help=help,
    )


def zookeeper_option(
    *, help: str, short: bool = False, required: bool = False, **attrs: Any
) -> Callable[[F], F]:
    """``--zookeeper`` (and ``-z`` with ``short``), from ``$KEYSHARED_ZOOKEEPER`` if not given.

    ``attrs``: further ``click.option`` attributes of one command; ``default=None`` is kept
    where a command had it (click tells it from no default at all)."""
    names = ("--zookeeper", "-z") if short else ("--zookeeper",)
    return click.option(*names, envvar="KEYSHARED_ZOOKEEPER", required=required, help=help, **attrs)


def namespace_option() -> Callable[[F], F]:
    """``--namespace``: the root znode of keyshared's coordination data."""
    return click.option(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        show_default=True,
        help="Root znode of keyshared's coordination data.",
    )


def zookeeper_auth_option() -> Callable[[F], F]:
    """``--auth USER:PASSWORD`` (digest), from ``$KEYSHARED_ZOOKEEPER_AUTH`` if not given."""
    return click.option(
        "--auth",
        callback=zookeeper_auth,
        envvar="KEYSHARED_ZOOKEEPER_AUTH",
        metavar="USER:PASSWORD",
        help="Digest USER:PASSWORD of the group ($KEYSHARED_ZOOKEEPER_AUTH).",
    )


def group_option(help: str) -> Callable[[F], F]:
    """``--group`` / ``-g``, required: the consumer group."""
    return click.option("--group", "-g", required=True, help=help)


def topic_option(help: str) -> Callable[[F], F]:
    """``--topic`` / ``-t``, required: the one topic the command works on."""
    return click.option("--topic", "-t", required=True, help=help)


def timeout_option(*, help: str, default: float = 15.0, minimum: float = 0.5) -> Callable[[F], F]:
    """``--timeout`` in seconds, with its default shown."""
    return click.option(
        "--timeout",
        type=click.FloatRange(min=minimum),
        default=default,
        show_default=True,
        help=help,
    )


def client_properties_option(
    *, metavar: str = "NAME=VALUE", help: str = CLIENT_PROPERTIES_HELP
) -> Callable[[F], F]:
    """``-X NAME=VALUE`` (repeatable) into ``properties``: client properties passed through."""
    return click.option("-X", "properties", multiple=True, metavar=metavar, help=help)


def parse_properties(values: tuple[str, ...]) -> dict[str, str]:
    props = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="-X")
        props[name.strip()] = value
    return props


class CommandError(click.ClickException):
    """The command could not do its job (exit 2), as opposed to a report that found a problem."""

    exit_code = 2


def broker_options(fn: F) -> F:
    """Options every read-only operator command shares: where Kafka is and how long to wait."""
    decorators = [
        bootstrap_servers_option(),
        group_option("Consumer group id."),
        click.option(
            "--dlq-topic",
            default=DEFAULT_DLQ_TOPIC,
            show_default=True,
            help="DLQ topic of each topic; {topic} is the source topic.",
        ),
        timeout_option(help="Seconds any single read may take."),
        click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts."),
        client_properties_option(),
    ]
    for decorate in reversed(decorators):
        fn = decorate(fn)
    return fn


def reader_for(bootstrap_servers: str, properties: Sequence[str], timeout: float) -> GroupReader:
    """A reader with the operator's client properties; ``-X`` cannot move the cluster."""
    config = {**parse_properties(tuple(properties)), "bootstrap.servers": bootstrap_servers}
    return GroupReader(config, timeout)
