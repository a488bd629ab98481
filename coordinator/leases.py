"""Leases: the mandatory drain, and the fencing token of each owner.

A lease says "this member processes this slot range (``key_shared``) or this partition
(``partition`` mode) now". It is an ephemeral *sequential* znode created by the member that
wants it, ``leases/<lo>-<hi>-<seq>`` or ``partition-leases/<topic>@<p>-<seq>``, holding
``{member, generation, attempt}``. The acquisition queue is the znodes' order, as in kazoo's
Lock, but over ranges: an acquisition is granted once no *overlapping* lease of *another
session* with a lower sequence number is left. A member's own older leases never block it, so a
member whose range shrinks takes its new, smaller range at once and releases the old one after
draining the part it lost.

"Its own" is decided by the znode's ``ephemeralOwner``, the session that created it, never by
the member id in its data: two processes started with one ``client.id`` are two sessions, and
the second must queue behind the first like any other member.

A create whose answer is lost (ConnectionLoss: the link dropped after the server may have
applied it) leaves a znode its creator does not know; left standing, it would block every later
owner of its key for the session's life, while its creator, queueing again, is never blocked by
it. Each create therefore carries a unique ``attempt`` in its data, and after a lost answer a
thread of its own looks for that attempt's znode once the connection is back and deletes it (as
kazoo's Lock finds its node by a GUID prefix). The name stays ``<key>-<seq>``, so every reader
(``keyshared status``, ``keyshared reset``, bench, members of an older version) still parses it.

That is the mandatory drain. When a range moves from A to B, B's acquisition queues behind A's
lease and returns only when the lease is gone: A deleted it after finishing its in-flight
records there and writing their cursors, or A's session ended (crash, expiry). Waiting is done
on ZooKeeper watches, never by polling.

The sequence number is the lease's **fencing token**: it is unique in the directory and every
later acquisition gets a larger one, so whoever holds a range after a hand-over holds a larger
token than every earlier holder. The consumer puts the token on the records it emits; and the
exact lease znode path is what cursor writes are conditional on (:mod:`coordinator.cursors`): a
re-created lease is a different znode, so a zombie can never write through someone else's lease.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionLoss,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.protocol.states import WatchedEvent
from kazoo.retry import KazooRetry

from coordinator.errors import AcquireCancelled, Fenced, LeaseTimeout
from coordinator.layout import (
    GroupLayout,
    format_partition,
    format_range,
    parse_partition,
    parse_range,
)
from keyshared.core.slots import SlotRange

__all__ = ["Lease", "LeaseInfo", "PartitionLeases", "PendingLease", "RangeLeases", "read_leases"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lease:
    """A granted lease.

    :param key: what it covers, as in the znode name: ``lo-hi`` or ``topic@partition``.
    :param path: the lease znode; cursor writes are conditional on it.
    :param member_id: the holder.
    :param generation: the assignment generation the holder acquired it for.
    :param token: the fencing token (the znode's sequence number), larger for later holders.
    """

    key: str
    path: str
    member_id: str
    generation: int
    token: int

    @property
    def slots(self) -> SlotRange:
        """The slot range of a range lease."""
        return parse_range(self.key)


@dataclass(frozen=True)
class LeaseInfo:
    """A lease znode as ``keyshared status`` shows it: granted (``held``) or still waiting.

    :param session: the ZooKeeper session that holds it (its ``ephemeralOwner``): what makes
        two leases one holder's, whatever their ``member_id``.
    """

    key: str
    path: str
    member_id: str
    generation: int
    token: int
    held: bool
    session: int = 0

    def slots_overlap(self, slots: SlotRange) -> bool:
        """Whether this range lease covers any of ``slots``."""
        return parse_range(self.key).overlaps(slots)


def _split(name: str) -> tuple[str, int]:
    key, _, sequence = name.rpartition("-")
    return key, int(sequence)


def _ranges_overlap(a: str, b: str) -> bool:
    return parse_range(a).overlaps(parse_range(b))


def same_partition(a: str, b: str) -> bool:
    """Partition leases conflict only with leases of the same partition."""
    return a == b


def read_leases(
    client: KazooClient, directory: str, overlaps: Callable[[str, str], bool] = _ranges_overlap
) -> list[LeaseInfo]:
    """Every lease znode under ``directory`` in token order, with whether it is granted."""
    entries: list[tuple[str, int, str, int, str, int]] = []
    for name in client.get_children(directory):
        key, token = _split(name)
        try:
            data, stat = client.get(f"{directory}/{name}")
        except NoNodeError:
            continue
        raw = json.loads(data)
        member, generation = str(raw["member"]), int(raw["generation"])
        entries.append((key, token, member, generation, name, stat.ephemeralOwner))
    entries.sort(key=lambda e: e[1])
    infos: list[LeaseInfo] = []
    for index, (key, token, member, generation, name, session) in enumerate(entries):
        held = not any(
            other_session != session and overlaps(other_key, key)
            for other_key, _, _, _, _, other_session in entries[:index]
        )
        path = f"{directory}/{name}"
        infos.append(LeaseInfo(key, path, member, generation, token, held, session))
    return infos


class PendingLease:
    """An acquisition in the queue: :meth:`wait` for it, or :meth:`cancel` it from any thread.

    Its znode exists from creation, so later acquisitions of overlapping keys queue behind it.
    If the wait ends in any way other than a grant, the znode is deleted.
    """

    def __init__(
        self,
        client: KazooClient,
        directory: str,
        key: str,
        member_id: str,
        generation: int,
        overlaps: Callable[[str, str], bool],
    ) -> None:
        self._client = client
        self._directory = directory
        self._key = key
        self._member_id = member_id
        self._generation = generation
        self._overlaps = overlaps
        self._wake = threading.Event()
        self._cancelled = False
        self._owners: dict[str, int] = {}  # znode name -> its session (never changes)
        attempt = uuid.uuid4().hex
        data = json.dumps({"member": member_id, "generation": generation, "attempt": attempt})
        try:
            self.path: str = client.create(
                f"{directory}/{key}-", data.encode(), ephemeral=True, sequence=True
            )
        except (ConnectionLoss, OperationTimeoutError):
            _forget_unanswered(client, directory, key, attempt)
            raise  # the caller queues again: as if this create had never been made
        self.token = _split(self.path.rsplit("/", 1)[1])[1]

    def cancel(self) -> None:
        """Give up: :meth:`wait` raises :class:`AcquireCancelled` (no effect once granted)."""
        self._cancelled = True
        self._wake.set()

    def _on_watch(self, _event: WatchedEvent) -> None:
        self._wake.set()

    def _on_state(self, state: str) -> bool:
        if state == KazooState.LOST:  # watches do not fire for an expired session
            self._wake.set()
        return False

    def _blockers(self, session: int) -> list[str]:
        """Lower-sequence znodes of other sessions than ``session`` (this acquisition's) whose
        keys overlap, nearest first."""
        blockers: list[tuple[int, str]] = []
        for name in self._client.get_children(self._directory):
            key, token = _split(name)
            if token >= self.token or not self._overlaps(key, self._key):
                continue
            path = f"{self._directory}/{name}"
            owner = self._owners.get(name)
            if owner is None:
                stat = self._client.exists(path)
                if stat is None:
                    continue
                owner = self._owners[name] = stat.ephemeralOwner
            if owner != session:
                blockers.append((token, path))
        return [path for _, path in sorted(blockers, reverse=True)]

    def wait(self, timeout: float | None = None) -> Lease:
        """Block until granted: every overlapping lease of another session queued earlier is
        gone (released after its drain, or vanished with its session).

        :param timeout: seconds; ``None`` waits as long as it takes.
        :raises LeaseTimeout: the drain did not finish in time (the acquisition is withdrawn).
        :raises AcquireCancelled: :meth:`cancel` was called.
        :raises Fenced: this member's session was lost while waiting.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        self._client.add_listener(self._on_state)
        granted = False
        try:
            while True:
                self._wake.clear()
                if self._cancelled:
                    raise AcquireCancelled(f"acquisition of lease {self._key} cancelled")
                try:  # a dropped connection is retried until it is back or the session is gone
                    blockers = self._client.retry(self._check)
                except SessionExpiredError:
                    raise Fenced(self.path, f"acquire lease {self._key} (session lost)") from None
                if blockers is None:
                    granted = True
                    log.info(
                        "lease %s granted to %s (token %d)", self._key, self._member_id, self.token
                    )
                    return Lease(
                        self._key, self.path, self._member_id, self._generation, self.token
                    )
                if not blockers:
                    continue  # the nearest blocker went between listing and watching
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise LeaseTimeout(self._key, timeout or 0.0, blockers)
                self._wake.wait(remaining)
        finally:
            self._client.remove_listener(self._on_state)
            if not granted:
                self._withdraw()

    def _check(self) -> list[str] | None:
        """One look: ``None`` when granted, else the blockers with a watch set on the nearest
        (an empty list if it vanished meanwhile).

        :raises Fenced: this acquisition's znode is gone (its session ended).
        """
        mine = self._client.exists(self.path, watch=self._on_watch)
        if mine is None:
            raise Fenced(self.path, f"acquire lease {self._key} (session lost)")
        blockers = self._blockers(mine.ephemeralOwner)
        if not blockers:
            return None
        if self._client.exists(blockers[0], watch=self._on_watch) is None:
            return []
        return blockers

    def _withdraw(self) -> None:
        """Delete the queued znode, retried across a dropped connection (on the waiter's
        thread): left standing, it would block every later acquisition of its key for the
        session's life. An expired session took it already."""
        try:
            self._client.retry(self._client.delete, self.path)
        except (NoNodeError, SessionExpiredError):
            pass
        except Exception:
            log.warning("could not withdraw lease znode %s", self.path, exc_info=True)


def _forget_unanswered(client: KazooClient, directory: str, key: str, attempt: str) -> None:
    """Delete the znode of a create whose answer was lost, if ZooKeeper applied it, on a
    thread of its own: the connection is down now, and the caller's thread (a member's poll
    thread) must not wait for it. Requests made while disconnected wait for the connection;
    the session's end (or the client's close) takes the znode with it and ends the look."""

    def look() -> None:
        client.sync(directory)  # a server reached after the drop may lag behind the one lost
        for name in client.get_children(directory):
            if _split(name)[0] != key:
                continue
            path = f"{directory}/{name}"
            try:
                data, _ = client.get(path)
            except NoNodeError:
                continue
            if json.loads(data).get("attempt") == attempt:
                with contextlib.suppress(NoNodeError):
                    client.delete(path)
                log.warning(
                    "lease %s: deleted %s, created by a request whose answer was lost", key, path
                )
                return

    def run() -> None:
        retry = KazooRetry(max_tries=-1, max_delay=1.0, ignore_expire=False)
        try:
            retry(look)
        except SessionExpiredError:
            pass  # an ephemeral znode goes with its session
        except Exception:
            log.warning(
                "lease %s: looking for the znode of a lost answer failed", key, exc_info=True
            )

    threading.Thread(target=run, name=f"keyshared-lease-lost-{key}", daemon=True).start()


class _Leases:
    """Acquire and release leases in one directory (shared by the range and partition kinds)."""

    def __init__(
        self,
        client: KazooClient,
        directory: str,
        member_id: str,
        overlaps: Callable[[str, str], bool],
    ) -> None:
        self._client = client
        self._directory = directory
        self.member_id = member_id
        self._overlaps = overlaps

    def _begin(self, key: str, generation: int) -> PendingLease:
        return PendingLease(
            self._client, self._directory, key, self.member_id, generation, self._overlaps
        )

    def release(self, lease: Lease) -> None:
        """Delete the lease: the drain is over and the next owner may start. Idempotent."""
        with contextlib.suppress(NoNodeError):
            self._client.delete(lease.path)
        log.info("lease %s released by %s", lease.key, lease.member_id)

    def is_held(self, lease: Lease) -> bool:
        """Whether the lease znode still exists (one read; fencing relies on cursors' checks)."""
        return self._client.exists(lease.path) is not None

    def read(self) -> list[LeaseInfo]:
        """Every lease znode in the directory, granted or queued."""
        return read_leases(self._client, self._directory, self._overlaps)


class RangeLeases(_Leases):
    """Leases on slot ranges (``key_shared`` mode).

    The seed's canonical case: A holds 0-32767; the range moves to B; B's ``acquire`` returns
    only after A's ``release`` (or A's session ends)::

        a_lease = RangeLeases(client_a, layout, "A").acquire(SlotRange(0, 32767), generation=1)
        # generation 2 gives the range to B; on another thread:
        b_lease = RangeLeases(client_b, layout, "B").acquire(SlotRange(0, 32767), generation=2)
        # ... blocks while A drains its in-flight records and writes its cursors ...
        RangeLeases(client_a, layout, "A").release(a_lease)    # now B's acquire returns

    :param client: a started kazoo client; the leases live as long as its session.
    :param layout: the group's paths.
    :param member_id: the member acquiring.
    """

    def __init__(self, client: KazooClient, layout: GroupLayout, member_id: str) -> None:
        super().__init__(client, layout.leases, member_id, _ranges_overlap)

    def begin(self, slots: SlotRange, *, generation: int) -> PendingLease:
        """Queue for ``slots`` without waiting (wait or cancel on the returned object)."""
        return self._begin(format_range(slots), generation)

    def acquire(self, slots: SlotRange, *, generation: int, timeout: float | None = None) -> Lease:
        """Queue for ``slots`` and wait until granted; see :meth:`PendingLease.wait`."""
        return self.begin(slots, generation=generation).wait(timeout)


class PartitionLeases(_Leases):
    """Leases on whole partitions (``partition`` mode): a newly assigned partition waits for
    its previous owner's lease, exactly like a range.

    Example::

        leases = PartitionLeases(client, GroupLayout("orders"), "worker-1")
        lease = leases.acquire("payments", 3, generation=7, timeout=60)
        ...
        leases.release(lease)

    :param client: a started kazoo client.
    :param layout: the group's paths.
    :param member_id: the member acquiring.
    """

    def __init__(self, client: KazooClient, layout: GroupLayout, member_id: str) -> None:
        super().__init__(client, layout.partition_leases, member_id, same_partition)

    def begin(self, topic: str, partition: int, *, generation: int) -> PendingLease:
        """Queue for the partition without waiting."""
        return self._begin(format_partition(topic, partition), generation)

    def acquire(
        self, topic: str, partition: int, *, generation: int, timeout: float | None = None
    ) -> Lease:
        """Queue for the partition and wait until granted; see :meth:`PendingLease.wait`."""
        return self.begin(topic, partition, generation=generation).wait(timeout)

    @staticmethod
    def partition_of(lease: Lease) -> tuple[str, int]:
        """``(topic, partition)`` of a partition lease."""
        return parse_partition(lease.key)
