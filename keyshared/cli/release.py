"""`keyshared release`: let a blocked or parked key go, from any machine that reaches Kafka.

The release is a tombstone in the group's key-state topic (see ``keyshared.kafka.keystate``).
Every running member of the group tails that topic, so the member that owns the key's partition
releases it within moments, and a member that gets the partition later no longer finds it parked.
The tombstone is written even when the key is not recorded (a block is recorded best effort), so
an operator can always release what a consumer holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import click

from keyshared.cli.options import (
    bootstrap_servers_option,
    client_properties_option,
    group_option,
    parse_properties,
    timeout_option,
    topic_option,
)
from keyshared.kafka.keystate import KeyStateError, KeyStateStore

__all__ = ["release"]


def _call_later(delay: float, fn: Callable[[], None]) -> None:
    timer = threading.Timer(delay, fn)
    timer.daemon = True
    timer.start()


def _show(key: bytes | None) -> str:
    if key is None:
        return "the null key"
    try:
        return f"key {key.decode('utf-8')!r}"
    except UnicodeDecodeError:
        return f"key 0x{key.hex()}"


@click.command()
@bootstrap_servers_option()
@group_option("Consumer group that holds the key.")
@topic_option("Source topic of the key.")
@click.option("--partition", "-p", type=click.IntRange(min=0), required=True,
              help="Source partition of the key.")  # fmt: skip
@click.option("--key", "-k", "key_text", help="The key, as UTF-8 text.")
@click.option("--key-hex", help="The key as hex, for keys that are not UTF-8 text.")
@click.option("--null-key", is_flag=True, help="Release the null key (distinct from '').")
@timeout_option(default=30.0, minimum=1.0, help="Seconds to wait for the broker.")
@client_properties_option()
def release(
    bootstrap_servers: str,
    group: str,
    topic: str,
    partition: int,
    key_text: str | None,
    key_hex: str | None,
    null_key: bool,
    timeout: float,
    properties: tuple[str, ...],
) -> None:
    """Release a blocked or parked key of a consumer group.

    A blocked key resumes with the record after the one that blocked it; a parked key's later
    records are processed again instead of going to the DLQ.
    """
    given = [choice for choice in (key_text, key_hex) if choice is not None] + [None] * null_key
    if len(given) != 1:
        raise click.UsageError("give exactly one of --key, --key-hex and --null-key")
    key: bytes | None = None
    if key_hex is not None:
        try:
            key = bytes.fromhex(key_hex)
        except ValueError:
            raise click.BadParameter(f"{key_hex!r} is not hex", param_hint="--key-hex") from None
    elif key_text is not None:
        key = key_text.encode("utf-8")
    config = {**parse_properties(properties), "bootstrap.servers": bootstrap_servers}
    store = KeyStateStore(config, group, lambda *_: None, _call_later)
    try:
        store.start(timeout, create=False)
        store.sync(timeout)
        before = store.get(topic, partition, key)
        store.release(topic, partition, key, timeout)
    except KeyStateError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        store.close(timeout)
    where = f"{_show(key)} of {topic}[{partition}] in group {group!r}"
    if before is None:
        click.echo(f"Released {where}: it was not recorded as blocked or parked; a consumer "
                   "that holds it releases it now.")  # fmt: skip
    else:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(before.since))
        detail = f": {before.error}" if before.error else ""
        click.echo(f"Released {where}, {before.state} at offset {before.offset} since "
                   f"{since}{detail}.")  # fmt: skip
    click.echo(f"(tombstone written to {store.topic!r})")
