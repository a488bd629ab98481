"""Exclusive mode (``ordering_required``): one active member per group, standbys take over.

kazoo's :class:`~kazoo.recipe.lock.Lock` on the group's ``active`` directory: the holder is the
one member that consumes; the others block in :meth:`ExclusiveLock.acquire` until the holder
releases or its session ends, including after ``kill -9``, once ZooKeeper expires the session
(``session_timeout``). The new holder must still treat the topic as handed over: it resumes
from the committed offsets, and the lock's fencing token (its sequence number, larger for each
later holder) goes on what it emits, so a holder that was paused past its session cannot be
mistaken for the current one.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import CancelledError, LockTimeout
from kazoo.recipe.lock import Lock

from coordinator.errors import AcquireCancelled
from coordinator.layout import GroupLayout

__all__ = ["ExclusiveLock"]

log = logging.getLogger(__name__)


class ExclusiveLock:
    """The group's single active member.

    Example::

        active = ExclusiveLock(client, GroupLayout("commands"), "worker-1")
        if active.acquire(timeout=None):   # standby until the holder goes
            try:
                ...                         # consume, strictly serially
            finally:
                active.release()

    :param client: a started kazoo client; the lock lives as long as its session.
    :param layout: the group's paths.
    :param member_id: this member's id, shown by :meth:`holder`.
    """

    def __init__(self, client: KazooClient, layout: GroupLayout, member_id: str) -> None:
        self._layout = layout
        self.member_id = member_id
        self._lock = Lock(client, layout.active, member_id)

    def acquire(self, timeout: float | None = None) -> bool:
        """Block until this member is the active one; ``False`` if ``timeout`` ran out first.

        :raises AcquireCancelled: :meth:`cancel` was called (shutdown).
        """
        try:
            acquired = bool(self._lock.acquire(blocking=True, timeout=timeout))
        except LockTimeout:
            return False
        except CancelledError:
            raise AcquireCancelled(
                f"{self.member_id} stopped waiting to become active in {self._layout.group}"
            ) from None
        if acquired:
            log.info(
                "%s is the active member of group %s (token %d)",
                self.member_id,
                self._layout.group,
                self.token,
            )
        return acquired

    @property
    def is_active(self) -> bool:
        """Whether this member holds the lock (as far as it knows: a LOST session ends it)."""
        return bool(self._lock.is_acquired)

    @property
    def token(self) -> int:
        """The fencing token of the current hold (the lock znode's sequence number), or -1."""
        node = self._lock.node
        return int(node[-10:]) if self.is_active and node else -1

    def cancel(self) -> None:
        """Make a blocked :meth:`acquire` raise :class:`AcquireCancelled` (from any thread)."""
        self._lock.cancel()

    def release(self) -> None:
        """Stop being active; the next standby takes over."""
        if self._lock.release():
            log.info("%s released the active role of group %s", self.member_id, self._layout.group)

    def holder(self) -> str | None:
        """The active member's id, or ``None`` when nobody holds the lock."""
        contenders = self._lock.contenders()
        return str(contenders[0]) if contenders else None
