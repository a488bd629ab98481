"""Operator pins: a slot range assigned to a member by hand (``keyshared assign``).

A pin is a persistent znode ``pins/<lo>-<hi>@<member>``, so it survives restarts of the members
and the leader. The leader feeds the pins of live members to the planner, which gives each
pinned range to its member and balances the rest around it; a pin of a member that is not live
is kept but not applied until it returns. Pins of one group never overlap: :meth:`Pins.set`
checks against the others and commits with a compare-and-set on the ``pins`` directory, so two
operators racing cannot both succeed with overlapping ranges.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, RolledBackError

from coordinator.errors import PinConflict
from coordinator.layout import GroupLayout, decode_name, parse_range
from keyshared.core.slots import SlotRange

__all__ = ["Pins", "read_pins"]

log = logging.getLogger(__name__)


def _parse_pin(name: str) -> tuple[SlotRange, str]:
    slots, _, member = name.partition("@")
    return parse_range(slots), decode_name(member)


def read_pins(client: KazooClient, layout: GroupLayout) -> dict[SlotRange, str]:
    """Every pin of the group: range -> member id."""
    return dict(_parse_pin(name) for name in client.get_children(layout.pins))


class Pins:
    """Sets and releases a group's operator pins.

    Example::

        pins = Pins(client, GroupLayout("orders"))
        pins.set(SlotRange(0, 999), "worker-2")     # the leader moves 0-999 to worker-2
        pins.release(SlotRange(0, 999))             # back to automatic balancing

    :param client: a started kazoo client (with the group's credentials when ACLs are on).
    :param layout: the group's paths.
    """

    def __init__(self, client: KazooClient, layout: GroupLayout) -> None:
        self._client = client
        self._layout = layout

    def list(self) -> dict[SlotRange, str]:
        """Every pin: range -> member id."""
        return read_pins(self._client, self._layout)

    def set(self, slots: SlotRange, member_id: str) -> None:
        """Pin ``slots`` to ``member_id``, replacing a pin of exactly the same range.

        :raises PinConflict: when ``slots`` overlaps another pinned range.
        """
        self._commit(slots, member_id)
        log.info("pinned %s to %s in group %s", slots, member_id, self._layout.group)

    def release(self, slots: SlotRange) -> bool:
        """Remove the pin of exactly ``slots``; return whether there was one."""
        removed = self._commit(slots, None)
        if removed:
            log.info("released pin of %s in group %s", slots, self._layout.group)
        return removed

    def _commit(self, slots: SlotRange, member_id: str | None) -> bool:
        """Replace the pin of ``slots`` (None: remove it), compare-and-set on the directory."""
        while True:
            _, stat = self._client.get(self._layout.pins)
            existing = read_pins(self._client, self._layout)
            for other, owner in existing.items():
                if other != slots and other.overlaps(slots) and member_id is not None:
                    raise PinConflict(
                        f"pin of {slots} to {member_id!r} overlaps the pin of {other} to "
                        f"{owner!r} in group {self._layout.group}; release that one first"
                    )
            previous = existing.get(slots)
            if previous == member_id:
                return previous is not None
            transaction = self._client.transaction()
            transaction.set_data(self._layout.pins, b"", version=stat.version)
            if previous is not None:
                transaction.delete(self._layout.pin(slots, previous))
            if member_id is not None:
                transaction.create(self._layout.pin(slots, member_id), b"")
            results = transaction.commit()
            errors = [r for r in results if isinstance(r, Exception)]
            if not errors:
                return previous is not None
            if not isinstance(results[0], BadVersionError | RolledBackError):
                raise next(e for e in errors if not isinstance(e, RolledBackError))
            # another pin changed meanwhile: read again and retry
