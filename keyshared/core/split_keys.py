"""Keys one topic carries in more than one partition: the trace of mixed producer partitioners.

Why it matters: Kafka orders records per partition, and every consumer's per-key order rests on
a key always landing in the same partition. librdkafka's default partitioner
(``consistent_random``: CRC32 of the key) and the Java client's (murmur2) send one key to
different partitions, so a topic written by both silently interleaves each key's records across
two partitions; no consumer can restore their order. Adding partitions to a topic moves keys
too. Neither shows anywhere until records are handled out of order.

How it stays cheap: only keys whose hash has its low ``sample_bits`` bits zero are tracked (one
in 16 by default), so the per-record cost is a hash and a bit test; a tracked key is checked on
every one of its records, so a split key among them is found on the first record that lands in
its second partition. Memory is bounded: per topic at most ``max_keys`` hashes (the oldest go
first) — hashes, not keys, so a one-mebibyte key costs no more than a short one.

Example:

>>> splits = SplitKeyDetector(sample_bits=0)     # track every key (tests, small topics)
>>> splits.note("orders", 0, hash(b"k1"), b"k1") is None
True
>>> splits.note("orders", 0, hash(b"k1"), b"k1") is None   # same partition: fine
True
>>> splits.note("orders", 3, hash(b"k1"), b"k1")
SplitKey(topic='orders', key=b'k1', partitions=(0, 3))
>>> splits.note("orders", 0, hash(b"k1"), b"k1") is None   # each key is reported once
True
>>> splits.take()
[(SplitKey(topic='orders', key=b'k1', partitions=(0, 3)), 1)]
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SplitKey", "SplitKeyDetector"]

_REPORTED = -1  # a key already reported as split: not reported (or counted) again


@dataclass(frozen=True)
class SplitKey:
    """A key seen in two partitions of one topic (the first two it was seen in)."""

    topic: str
    key: bytes
    partitions: tuple[int, int]


class SplitKeyDetector:
    """Remembers, for a sample of keys, the partition each was first seen in, per topic.

    Not thread-safe: the dispatcher calls :meth:`note` under its lock on the poll thread, and
    the poll thread calls :meth:`take`.

    :param sample_bits: a key is tracked when ``hash & (2**sample_bits - 1) == 0``.
    :param max_keys: tracked key hashes per topic; beyond, the oldest are forgotten.
    """

    def __init__(self, sample_bits: int = 4, max_keys: int = 4096) -> None:
        self.mask = (1 << sample_bits) - 1
        self._max_keys = max_keys
        self._seen: dict[str, dict[int, int]] = {}
        # Since the last take(), per topic: the first split found and how many were found.
        self._found: dict[str, tuple[SplitKey, int]] = {}

    def note(self, topic: str, partition: int, key_hash: int, key: bytes) -> SplitKey | None:
        """Record a sampled key's partition; return the split the first time it shows.

        The caller samples: call only when ``key_hash & self.mask == 0``.
        """
        seen = self._seen.get(topic)
        if seen is None:
            seen = self._seen[topic] = {}
        first = seen.get(key_hash)
        if first is None:
            if len(seen) >= self._max_keys:
                del seen[next(iter(seen))]  # dicts keep insertion order: the oldest goes
            seen[key_hash] = partition
            return None
        if first in (partition, _REPORTED):
            return None
        seen[key_hash] = _REPORTED
        split = SplitKey(topic, key, (first, partition))
        example, count = self._found.get(topic, (split, 0))
        self._found[topic] = (example, count + 1)
        return split

    def take(self) -> list[tuple[SplitKey, int]]:
        """Per topic with splits since the last call: the first one found and how many."""
        found, self._found = self._found, {}
        return list(found.values())
