"""Group membership: each live member is an ephemeral znode, and a watch reports the live set.

The member znode lives exactly as long as the member's ZooKeeper session, so a crashed or
partitioned member leaves the group by itself once its session expires, and the leader replans
without it. The znode's data describes the member (host, pid, mode, topics, key filters) for the
leader's plan and for ``keyshared status``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from coordinator._worker import Refresher
from coordinator.errors import MemberIdInUse
from coordinator.layout import GroupLayout, decode_name

__all__ = ["MemberInfo", "MembersWatch", "Membership", "read_members"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemberInfo:
    """What a member says about itself in its znode.

    :param member_id: unique within the group; the owner name in the assignment and leases.
    :param host: where it runs (default: this host's name).
    :param pid: its process id (default: this process).
    :param weight: relative capacity, recorded for operators; the planner balances slots
        evenly and does not use it yet.
    :param key_filters: glob key filters of the member (see :mod:`keyshared.core.filters`).
    :param mode: ``partition``, ``key_shared`` or ``exclusive``.
    :param topics: the topics it consumes.
    """

    member_id: str
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    weight: int = 1
    key_filters: tuple[str, ...] = ()
    mode: str = "key_shared"
    topics: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "id": self.member_id,
                "host": self.host,
                "pid": self.pid,
                "weight": self.weight,
                "key_filters": list(self.key_filters),
                "mode": self.mode,
                "topics": list(self.topics),
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> MemberInfo:
        raw = json.loads(data)
        return cls(
            member_id=str(raw["id"]),
            host=str(raw.get("host", "")),
            pid=int(raw.get("pid", 0)),
            weight=int(raw.get("weight", 1)),
            key_filters=tuple(raw.get("key_filters", ())),
            mode=str(raw.get("mode", "key_shared")),
            topics=tuple(raw.get("topics", ())),
        )


class Membership:
    """This member's presence in the group: an ephemeral znode created by :meth:`join`.

    Example::

        membership = Membership(client, GroupLayout("orders"), MemberInfo("worker-1"))
        membership.join()
        ...
        membership.leave()

    :param client: a started kazoo client; the znode lives as long as its session.
    :param layout: the group's paths (directories must exist: :meth:`GroupLayout.ensure`).
    :param info: what the znode says about this member.
    """

    def __init__(self, client: KazooClient, layout: GroupLayout, info: MemberInfo) -> None:
        self._client = client
        self._layout = layout
        self.info = info
        self.path = layout.member(info.member_id)

    def join(self, wait: float = 0.0) -> None:
        """Create the member znode; idempotent for this session (call again after a
        ``RENEWED`` session, whose predecessor's ephemeral znodes are gone).

        :param wait: how long a znode of another session may take to go (a process restarted
            with the same id before its predecessor's session expired): one session timeout.
        :raises MemberIdInUse: when another live session still uses this member id.
        """
        deadline = time.monotonic() + wait
        while True:
            try:
                # Retried over a lost connection: a create ZooKeeper applied but whose reply
                # was lost comes back as NodeExists, of this very session (below).
                self._client.retry(
                    self._client.create, self.path, self.info.to_json(), ephemeral=True
                )
                break
            except NodeExistsError:
                gone = threading.Event()
                try:
                    data, stat = self._client.get(self.path, watch=lambda _e, g=gone: g.set())
                except NoNodeError:
                    continue  # gone meanwhile: try again
                if stat.ephemeralOwner == self._client.client_id[0]:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not gone.wait(remaining):
                    raise MemberIdInUse(
                        self.info.member_id, self._layout.group, _holder(data), wait
                    ) from None
        log.info("joined group %s as %s", self._layout.group, self.info.member_id)

    def leave(self) -> None:
        """Delete the member znode now instead of waiting for the session to end."""
        with contextlib.suppress(NoNodeError):
            self._client.delete(self.path)
        log.info("left group %s as %s", self._layout.group, self.info.member_id)


def _holder(data: bytes) -> str:
    """Host and pid of a member znode's owner, for an error message."""
    try:
        info = MemberInfo.from_json(data)
    except (ValueError, KeyError, TypeError):
        return "unknown host and pid"
    return f"host {info.host}, pid {info.pid}"


def read_members(client: KazooClient, layout: GroupLayout) -> dict[str, MemberInfo]:
    """The live members, by id (members leaving while this reads are skipped)."""
    members: dict[str, MemberInfo] = {}
    for name in client.get_children(layout.members):
        try:
            data, _ = client.get(f"{layout.members}/{name}")
        except NoNodeError:
            continue
        try:
            info = MemberInfo.from_json(data)
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring member znode %s with unreadable data", name)
            info = MemberInfo(decode_name(name), host="", pid=0)
        members[info.member_id] = info
    return members


class MembersWatch:
    """Reports the group's live members whenever the set changes, starting with the current one.

    Example::

        watch = MembersWatch(client, GroupLayout("orders"), lambda live: print(sorted(live)))
        ...
        watch.stop()

    :param client: a started kazoo client.
    :param layout: the group's paths.
    :param on_change: called with ``{member_id: MemberInfo}`` on the watch's own thread, once
        for the current set and then after each change (bursts coalesce into one call).
    """

    def __init__(
        self,
        client: KazooClient,
        layout: GroupLayout,
        on_change: Callable[[dict[str, MemberInfo]], None],
    ) -> None:
        self._client = client
        self._layout = layout
        self._on_change = on_change
        self._last: dict[str, MemberInfo] | None = None
        self._refresher = Refresher(f"keyshared-members-{layout.group}", self._refresh, client)
        client.ChildrenWatch(layout.members, self._on_children)

    def _on_children(self, _children: list[str]) -> bool | None:
        if self._refresher.stopped:
            return False
        self._refresher.poke()
        return None

    def _refresh(self) -> None:
        members = read_members(self._client, self._layout)
        if members != self._last:
            self._last = members
            self._on_change(dict(members))

    def stop(self) -> None:
        """Stop reporting (kazoo drops the watch at its next event)."""
        self._refresher.stop()
