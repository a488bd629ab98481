"""Plugs the ZooKeeper coordinator into one consumer run, in the consumer's mode.

Kept here rather than on :class:`coordinator.ZooKeeperCoordinator`: the coordinator is a
library of recipes and knows nothing of the consumer; the modes know both.
"""

from __future__ import annotations

from keyshared.core.modes import Mode
from keyshared.errors import ConfigurationError
from keyshared.kafka.seams import Plug, PlugContext
from keyshared.modes.recipes import Recipes

__all__ = ["plug"]


def plug(recipes: Recipes, context: PlugContext) -> Plug:
    """The seams of ``context``'s mode, filled with ``recipes`` (connected first).

    Called once per run by the consumer's assembly, on the thread that calls ``run``, after
    the dispatcher exists and before the first poll.

    :raises ConfigurationError: the coordinator does not support the consumer's mode.
    :raises CoordinatorUnreachable: no ZooKeeper server answered within its connect timeout.
    """
    from keyshared.modes.exclusive import ExclusiveMember
    from keyshared.modes.key_shared import KeySharedMember
    from keyshared.modes.partition_leases import PartitionLeaseMember

    mode = context.options.mode
    if mode not in (Mode.KEY_SHARED, Mode.PARTITION, Mode.EXCLUSIVE):
        raise ConfigurationError(
            "coordinator", f"the ZooKeeper coordinator does not support mode {mode!r}"
        )
    recipes.start()
    try:
        if mode is Mode.KEY_SHARED:
            member = KeySharedMember(recipes, context)
            return Plug(membership=member, ownership=member, cursor_store=member)
        if mode is Mode.PARTITION:
            leases = PartitionLeaseMember(recipes, context)
            return Plug(membership=leases, cursor_store=leases.commits)
        exclusive = ExclusiveMember(recipes, context)
        return Plug(membership=exclusive, cursor_store=exclusive)
    except BaseException:
        recipes.close()  # connected for nothing: end the session now
        raise
