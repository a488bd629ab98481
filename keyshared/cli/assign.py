"""`keyshared assign`: pin a slot range of a ``key_shared`` group to a member, or release a pin.

The pin is a persistent znode (``coordinator.pins``); the group's leader replans at once, and the
range moves to the member through the usual drain (the previous owner finishes its in-flight
records there first). Releasing a pin hands the range back to automatic balancing, which is
sticky: it stays where it is until membership changes make balancing move it.
"""

from __future__ import annotations

import click

from coordinator.errors import CoordinatorUnreachable, PinConflict
from coordinator.layout import GroupLayout
from coordinator.pins import Pins
from coordinator.session import connect
from keyshared.cli.options import (
    group_option,
    namespace_option,
    timeout_option,
    zookeeper_auth_option,
    zookeeper_option,
)
from keyshared.core.slots import SlotRange

__all__ = ["assign"]


def _slot_range(_ctx: click.Context, _param: click.Parameter, value: str) -> SlotRange:
    try:
        return SlotRange.parse(value)
    except (TypeError, ValueError) as error:
        raise click.BadParameter(str(error)) from None


@click.command()
@group_option("The key_shared consumer group.")
@click.option("--range", "slots", required=True, callback=_slot_range, metavar="LO-HI",
              help="Inclusive slot range, e.g. 0-999.")  # fmt: skip
@click.option("--member", "-m", help="Member id to pin the range to.")
@click.option("--release", "release_pin", is_flag=True,
              help="Remove the pin of exactly this range instead.")  # fmt: skip
@zookeeper_option(short=True, required=True,
                  help="ZooKeeper host:port (default: $KEYSHARED_ZOOKEEPER).")  # fmt: skip
@namespace_option()
@zookeeper_auth_option()
@timeout_option(help="Seconds to wait for ZooKeeper.")
def assign(
    group: str,
    slots: SlotRange,
    member: str | None,
    release_pin: bool,
    zookeeper: str,
    namespace: str,
    auth: tuple[str, str] | None,
    timeout: float,
) -> None:
    """Pin a slot range of a key_shared group to a member (or --release the pin)."""
    if release_pin == (member is not None):
        raise click.UsageError("give exactly one of --member and --release")
    try:
        client = connect(zookeeper, connect_timeout=timeout, auth=auth)
    except CoordinatorUnreachable as error:
        raise click.ClickException(str(error)) from None
    try:
        layout = GroupLayout(group, namespace)
        if client.exists(layout.pins) is None:
            raise click.ClickException(
                f"group {group!r} has no coordination data under {namespace} on {zookeeper}"
            )
        pins = Pins(client, layout)
        if member is None:
            if pins.release(slots):
                click.echo(f"released the pin of {slots} in group {group}")
            else:
                click.echo(f"no pin of exactly {slots} in group {group}; nothing changed")
            return
        try:
            pins.set(slots, member)
        except PinConflict as error:
            raise click.ClickException(str(error)) from None
        click.echo(f"pinned {slots} to {member} in group {group}; the leader replans now")
    finally:
        client.stop()
        client.close()
