"""The znode layout of a group: every path the coordinator reads or writes is built here.

One place for the paths means the tree in ``docs/coordinator.md`` is the tree in ZooKeeper, and a
path is never spelled twice. Names that come from users (groups, members, topics) are
percent-encoded so that any string is a valid, unambiguous znode name (no ``/``, never ``.`` or
``..``); slot ranges are written as zero-padded ``lo-hi`` so that znode order is slot order::

    /<namespace>/groups/<group>/
        members/<member>                    ephemeral   member info (JSON), one per live member
        leader/<uuid>__lock__<seq>          ephemeral   kazoo Election contenders
        assignment                          persistent  {generation, leader, ranges} (JSON)
        leases/<lo>-<hi>-<seq>              ephemeral   range lease {member, generation}
        partition-leases/<topic>@<p>-<seq>  ephemeral   partition lease {member, generation}
        cursors/<lo>-<hi>/<topic>@<p>       persistent  {offset, metadata, member, token,
                                                     topic_id, epoch}
        topics/<topic>                      persistent  the topic's incarnation record
        pins/<lo>-<hi>@<member>             persistent  operator pin of a range to a member
        active/<uuid>__lock__<seq>          ephemeral   exclusive mode's lock contenders

Example::

    >>> layout = GroupLayout("orders")
    >>> layout.member("host-1/pid 7")
    '/keyshared/groups/orders/members/host-1%2Fpid%207'
    >>> layout.cursor(SlotRange(0, 32767), "payments.eu", 3)
    '/keyshared/groups/orders/cursors/00000-32767/payments%2Eeu@3'
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from urllib.parse import unquote

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.security import ACL, OPEN_ACL_UNSAFE

from keyshared.core.slots import SlotRange

__all__ = [
    "DEFAULT_NAMESPACE",
    "GroupLayout",
    "decode_name",
    "encode_name",
    "format_range",
    "parse_range",
]

DEFAULT_NAMESPACE = "/keyshared"
"""Root of everything keyshared writes, so one ZooKeeper ensemble can serve other users too."""

_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def encode_name(text: str) -> str:
    """``text`` as one znode name: bytes outside ``[A-Za-z0-9_-]`` become ``%XX``.

    ``.``, ``@`` and ``%`` are encoded too, so the result is never ``.`` or ``..`` and the
    separators used in lease and cursor names (``@``, and ``-`` before a sequence number, which
    is always split from the right) stay unambiguous.
    """
    if not text:
        raise ValueError("a group, member or topic name must not be empty")
    return "".join(chr(b) if b in _PLAIN else f"%{b:02X}" for b in text.encode())


def decode_name(name: str) -> str:
    """The inverse of :func:`encode_name`."""
    return unquote(name, errors="strict")


def format_range(slots: SlotRange) -> str:
    """``lo-hi`` zero-padded to five digits, so znode names sort in slot order."""
    return f"{slots.lo:05d}-{slots.hi:05d}"


def parse_range(name: str) -> SlotRange:
    """The inverse of :func:`format_range`."""
    return SlotRange.parse(name)


def format_partition(topic: str, partition: int) -> str:
    """``<topic>@<partition>`` with the topic encoded."""
    return f"{encode_name(topic)}@{partition}"


def parse_partition(name: str) -> tuple[str, int]:
    """The inverse of :func:`format_partition`."""
    topic, _, partition = name.rpartition("@")
    return decode_name(topic), int(partition)


@dataclass(frozen=True)
class GroupLayout:
    """Paths of one group's znodes.

    :param group: the consumer group id (any string).
    :param namespace: the absolute root under which all groups live.
    """

    group: str
    namespace: str = DEFAULT_NAMESPACE

    def __post_init__(self) -> None:
        if not self.namespace.startswith("/") or self.namespace.endswith("/"):
            raise ValueError(f"namespace must look like '/name', got {self.namespace!r}")

    @property
    def root(self) -> str:
        return f"{self.namespace}/groups/{encode_name(self.group)}"

    @property
    def members(self) -> str:
        return f"{self.root}/members"

    def member(self, member_id: str) -> str:
        return f"{self.members}/{encode_name(member_id)}"

    @property
    def leader(self) -> str:
        return f"{self.root}/leader"

    @property
    def assignment(self) -> str:
        return f"{self.root}/assignment"

    @property
    def leases(self) -> str:
        return f"{self.root}/leases"

    @property
    def partition_leases(self) -> str:
        return f"{self.root}/partition-leases"

    @property
    def cursors(self) -> str:
        return f"{self.root}/cursors"

    def cursor_range(self, slots: SlotRange) -> str:
        return f"{self.cursors}/{format_range(slots)}"

    def cursor(self, slots: SlotRange, topic: str, partition: int) -> str:
        return f"{self.cursor_range(slots)}/{format_partition(topic, partition)}"

    @property
    def topics(self) -> str:
        return f"{self.root}/topics"

    def topic(self, topic: str) -> str:
        """The group's record of ``topic`` (:mod:`coordinator.incarnations`)."""
        return f"{self.topics}/{encode_name(topic)}"

    @property
    def pins(self) -> str:
        return f"{self.root}/pins"

    def pin(self, slots: SlotRange, member_id: str) -> str:
        return f"{self.pins}/{format_range(slots)}@{encode_name(member_id)}"

    @property
    def active(self) -> str:
        return f"{self.root}/active"

    @property
    def directories(self) -> tuple[str, ...]:
        """The persistent directories every group has, created by :meth:`ensure`."""
        return (
            self.members,
            self.leader,
            self.leases,
            self.partition_leases,
            self.cursors,
            self.topics,
            self.pins,
            self.active,
        )

    def ensure(self, client: KazooClient, acl: list[ACL] | None = None) -> None:
        """Create the group's directories if missing (idempotent, safe to race).

        The namespace and ``groups`` nodes are open (other groups, with other credentials, add
        themselves there); the group's own nodes
        get ``acl`` when given, so that with digest ACLs a client without the group's
        credentials can read but not change them.
        """
        client.ensure_path(f"{self.namespace}/groups", acl=OPEN_ACL_UNSAFE)
        for path in (self.root, *self.directories):
            with contextlib.suppress(NodeExistsError):
                client.create(path, b"", acl=acl)
