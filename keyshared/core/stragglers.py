"""Keys whose fenced calls still run, and the records of those keys that wait for them.

A ``key_shared`` member whose ZooKeeper session expired drops its partitions at once (fencing),
but it cannot stop a handler that is already running. When the member takes the range back,
its re-read hands the same record, or the key's next one, to a new window; starting it beside
the fenced call runs one key twice at once in one process. Holding the whole re-read back until
every fenced call has ended would stop every other key behind one stuck handler. So the hold
is per key: while a fenced call of key K runs, only K's records wait; every other key goes on.

:class:`KeyHolds` is that decision, without I/O or threads: the adapter tells it which calls a
fenced partition still runs (``fence``), asks it for each record its windows release
(``admit``), and tells it when a fenced call ends (``ended``, or ``source_ended`` once nothing
of a fenced partition runs any more). Records that waited come back, per key in the order they
came, when the key's last fenced call has ended. The adapter calls it under one lock.

Example::

    holds = KeyHolds[str, str]()
    holds.fence("old window", ["k", "j"])   # two calls of the fenced window still run
    holds.admit("k", "k@7")                 # -> False: waits for the fenced call of k
    holds.admit("x", "x@8")                 # -> True: x runs at once
    holds.ended("old window", "k")          # -> ["k@7"]: may start now
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["KeyHolds"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class KeyHolds(Generic[K, T]):
    """Fenced calls still running, counted per key, and the items waiting for them.

    Sources (the fenced partitions) are compared by identity: two fenced incarnations of one
    partition are two sources.
    """

    def __init__(self) -> None:
        self._running: Counter[K] = Counter()
        # id(source) -> (source, its calls still running per key); the source is kept so its
        # id cannot be reused while it is here
        self._sources: dict[int, tuple[object, Counter[K]]] = {}
        self._waiting: dict[K, list[T]] = {}

    def __bool__(self) -> bool:
        """Whether any fenced call is still running (nothing to check otherwise)."""
        return bool(self._running)

    def held(self, key: K) -> bool:
        return key in self._running

    def waiting(self) -> int:
        """Items waiting for a fenced call of their key."""
        return sum(len(items) for items in self._waiting.values())

    def fence(self, source: object, keys: Iterable[K]) -> None:
        """``source`` was fenced while calls of ``keys`` still run (one entry per call)."""
        counts = Counter(keys)
        if not counts:
            return
        found = self._sources.get(id(source))
        if found is None:
            self._sources[id(source)] = (source, counts)
        else:
            found[1].update(counts)
        self._running.update(counts)

    def admit(self, key: K, item: T) -> bool:
        """Whether ``item`` may start now; if not, it waits (in order) for ``key``'s calls."""
        if key in self._running:
            self._waiting.setdefault(key, []).append(item)
            return False
        return True

    def ended(self, source: object, key: K) -> list[T]:
        """A fenced call of ``key`` from ``source`` ended: the items that may start now.

        A call ``source`` was not fenced with (it ended before, or the source is unknown)
        changes nothing.
        """
        found = self._sources.get(id(source))
        if found is None or not found[1][key]:
            return []
        counts = found[1]
        counts[key] -= 1
        if not counts[key]:
            del counts[key]
            if not counts:
                del self._sources[id(source)]
        return self._lower(key, 1)

    def source_ended(self, source: object) -> list[T]:
        """Nothing of ``source`` runs any more: every hold it still had ends."""
        found = self._sources.pop(id(source), None)
        if found is None:
            return []
        released: list[T] = []
        for key, count in found[1].items():
            released.extend(self._lower(key, count))
        return released

    def withdraw(self, keep: Callable[[T], bool]) -> list[T]:
        """Remove the waiting items ``keep`` rejects (their window stopped dispatching) and
        return them; the holds stay."""
        removed: list[T] = []
        for key in list(self._waiting):
            items = self._waiting[key]
            kept = [item for item in items if keep(item)]
            if len(kept) != len(items):
                removed.extend(item for item in items if not keep(item))
                if kept:
                    self._waiting[key] = kept
                else:
                    del self._waiting[key]
        return removed

    def _lower(self, key: K, count: int) -> list[T]:
        left = self._running[key] - count
        if left > 0:
            self._running[key] = left
            return []
        del self._running[key]
        return self._waiting.pop(key, [])
