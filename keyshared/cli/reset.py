"""`keyshared reset`: rewind or skip a stopped group's position in a topic, in every mode.

Kafka's committed offsets (with keyshared's finished-offsets metadata cleared) and, with
``--zookeeper``, the group's ``key_shared`` cursors, which would otherwise win over Kafka's
offsets (``keyshared.ops.reset``). Refused, naming them, while members are live.
"""

from __future__ import annotations

from datetime import UTC, datetime

import click

from coordinator.errors import CoordinatorUnreachable
from coordinator.session import connect
from keyshared.cli.options import (
    bootstrap_servers_option,
    client_properties_option,
    group_option,
    namespace_option,
    parse_properties,
    timeout_option,
    topic_option,
    zookeeper_auth_option,
    zookeeper_option,
)
from keyshared.ops.admin import OpsError
from keyshared.ops.reset import GroupBusy, ResetPlan, Resetter, Target

__all__ = ["reset"]


def _offsets(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> dict[int, int]:
    offsets: dict[int, int] = {}
    for value in values:
        partition, sep, offset = value.partition(":")
        try:
            if not sep:
                raise ValueError(value)
            offsets[int(partition)] = int(offset)
        except ValueError:
            raise click.BadParameter(f"{value!r}: expected P:O, e.g. 0:1200") from None
    return offsets


def _when(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 date and time") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _show(plan: ResetPlan, dry_run: bool) -> None:
    head = "Dry run, nothing changed" if dry_run else "Reset"
    click.echo(f"{head}: group {plan.group!r}, topic {plan.topic!r}")
    for partition, offset in sorted(plan.after.items()):
        before = plan.before.get(partition, -1)
        cursors = sum(1 for c in plan.cursors if c.partition == partition)
        was = "none" if before < 0 else str(before)
        extra = f", {cursors} key_shared cursor(s) dropped" if cursors else ""
        click.echo(f"  partition {partition}: {was} -> {offset}{extra}")


@click.command()
@bootstrap_servers_option()
@group_option("The consumer group (stopped).")
@topic_option("The topic whose position to reset.")
@click.option("--to-earliest", is_flag=True, help="Rewind to the first record kept.")
@click.option("--to-latest", is_flag=True, help="Skip everything produced so far.")
@click.option("--to-datetime", callback=_when, metavar="ISO",
              help="The first record at or after this time (UTC unless an offset is given), "
              "e.g. 2026-11-25T14:00:00Z.")  # fmt: skip
@click.option("--to-offset", "to_offsets", multiple=True, callback=_offsets, metavar="P:O",
              help="Partition P to offset O (repeatable; other partitions are left as they "
              "are). Clamped to the partition's records.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Show what would change, change nothing.")
@zookeeper_option(short=True, default=None,
                  help="ZooKeeper of the group's coordinator: also resets key_shared cursors "
                  "and checks for live members there (default: $KEYSHARED_ZOOKEEPER).")  # fmt: skip
@namespace_option()
@zookeeper_auth_option()
@timeout_option(help="Seconds any single request may take.")
@client_properties_option()
def reset(
    bootstrap_servers: str,
    group: str,
    topic: str,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: datetime | None,
    to_offsets: dict[int, int],
    dry_run: bool,
    zookeeper: str | None,
    namespace: str,
    auth: tuple[str, str] | None,
    timeout: float,
    properties: tuple[str, ...],
) -> None:
    """Rewind or skip a stopped consumer group's position in a topic, in any mode.

    Moves Kafka's committed offsets (clearing the finished-offsets metadata) and, with
    --zookeeper, drops the group's key_shared cursors of the topic. Refuses while a member
    of the group is live.

    Example: keyshared reset -g billing -t orders --to-datetime 2026-11-25T14:00:00Z --dry-run
    """
    chosen = [to_earliest, to_latest, to_datetime is not None, bool(to_offsets)]
    if sum(chosen) != 1:
        raise click.UsageError(
            "give exactly one of --to-earliest, --to-latest, --to-datetime and --to-offset"
        )
    if to_earliest:
        target = Target.earliest()
    elif to_latest:
        target = Target.latest()
    elif to_datetime is not None:
        target = Target.at(to_datetime)
    else:
        target = Target.to(to_offsets)
    client = None
    if zookeeper:
        try:
            client = connect(zookeeper, connect_timeout=timeout, auth=auth)
        except CoordinatorUnreachable as error:
            raise click.ClickException(str(error)) from None
    config = {**parse_properties(properties), "bootstrap.servers": bootstrap_servers}
    try:
        resetter = Resetter(config, timeout, client, namespace)
        plan = resetter.plan(group, topic, target)
        if dry_run:
            live = resetter.live_members(group)
            _show(plan, dry_run=True)
            if live:
                click.echo(f"It would be refused now: live members {', '.join(live)}")
            return
        resetter.apply(plan)
        _show(plan, dry_run=False)
    except GroupBusy as error:
        raise click.ClickException(str(error)) from None
    except OpsError as error:
        raise click.ClickException(str(error)) from None
    finally:
        if client is not None:
            client.stop()
            client.close()
