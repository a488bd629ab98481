"""Which records of a partition a ``key_shared`` member runs: pure, decided per record.

A member reads every partition and runs a record only if its slot lies in a range it holds
(where the range resumes at or below the record: :class:`keyshared.core.claims.PartitionClaims`)
and its key passes the member's key filters; every other record counts as done for its own
window. Kept in the core, apart from the member's ZooKeeper and Kafka dealings, because it is
the one question asked of every record, and it is a pure function of the claims.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from keyshared.core.claims import PartitionClaims
from keyshared.core.filters import KeyFilter
from keyshared.core.slots import slot_of

__all__ = ["NULL_SLOT", "Admission"]

NULL_SLOT = slot_of(b"")
"""The slot of every null-key record when null keys are one ordered key."""

Accepts = Callable[[bytes | None, int], bool]


def _never(_key: bytes | None, _offset: int) -> bool:
    return False


class Admission:
    """A member's admission rule.

    :param key_filters: the member's key filters (none: every key).
    :param null_keys_ordered: null keys are one ordered key (one slot); otherwise each null-key
        record is independent, spread over the slots by its offset.

    >>> from keyshared.core.slots import SlotRange
    >>> rule = Admission([], null_keys_ordered=False)
    >>> claims = PartitionClaims.resolve([(SlotRange(0, 99), 7)], [], base=0)
    >>> [rule.of(claims)(None, offset) for offset in (5, 100)]  # slots 5 and 100
    [True, False]
    """

    def __init__(self, key_filters: Iterable[str], null_keys_ordered: bool) -> None:
        self._filter = KeyFilter(list(key_filters))
        self._ordered_nulls = null_keys_ordered

    def slot(self, key: bytes | None, offset: int) -> int:
        """A record's slot. Unordered null keys are independent records: spread by offset."""
        if key is None:
            return NULL_SLOT if self._ordered_nulls else offset & 0xFFFF
        return slot_of(key)

    def of(self, claims: PartitionClaims | None) -> Accepts:
        """Whether this member runs a record of the partition ``claims`` describe (None: a
        partition it does not read; nothing)."""
        if claims is None:
            return _never
        slot = self.slot
        accepts_key = None if self._filter.accepts_all else self._filter.accepts

        def accepts(key: bytes | None, offset: int) -> bool:
            if accepts_key is not None and not accepts_key(key):
                return False
            return claims.accepts(slot(key, offset), offset)

        return accepts
