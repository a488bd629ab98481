"""A key whose call outlived its partition state waits for it, alone, in every mode.

A partition's state ends while handlers of it may still run, and the member cannot stop them:
a ``key_shared`` member's session expired and it dropped every partition (fencing); an
exactly-once redo replaced a state after a failed transaction; a revoke's drain timed out and
the partition came back. The new state's window then hands the same record (or its key's next
one) to a worker; starting it would run one key twice at once in this process (and break
``exclusive`` mode's one serial lane per partition, whose records all share one lane key).
Holding the whole new state back until the old calls end would stall every other key behind
one stuck handler. So the hold is per key (:class:`keyshared.core.stragglers.KeyHolds`): the
dispatcher reports each removed state's running calls and each end of one, and asks before
starting a record; only records of a key with such a call still running wait, in their window,
counted as running, and start when it ends.

A record in its retry backoff when its state ended is not running: it is withdrawn from the
backoff and does not hold its key.

A key is a partition's record key, or for an unordered null-key record its offset (those are
independent records: only the same record waits).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from keyshared.core.stragglers import KeyHolds

if TYPE_CHECKING:
    from keyshared.runtime.partition import PartitionState

__all__ = ["FencedKeys"]

log = logging.getLogger(__name__)

Work = tuple["PartitionState", Any]
Held = tuple[str, int, bool, object]  # topic, partition, ordered, key (or offset)


class FencedKeys:
    """The dispatcher's per-key hold on removed states' running calls; called under the
    dispatcher's lock only."""

    def __init__(self) -> None:
        self._holds: KeyHolds[Held, Work] = KeyHolds()

    def __bool__(self) -> bool:
        return bool(self._holds)

    def fenced(self, state: PartitionState, stragglers: list[Any]) -> None:
        if stragglers:
            self._holds.fence(state, [_held(state, entry) for entry in stragglers])
            log.warning(
                "%s: %d call(s) still running after the partition was dropped; their keys "
                "start nothing here until they end (the other keys are not held)",
                state,
                len(stragglers),
            )

    def admit(self, works: list[Work]) -> list[Work]:
        holds = self._holds
        return [work for work in works if holds.admit(_held(*work), work)]

    def ended(self, state: PartitionState, entry: Any | None, idle: bool) -> list[Work]:
        released = [] if entry is None else self._holds.ended(state, _held(state, entry))
        if idle:
            released.extend(self._holds.source_ended(state))
        return released

    def withdraw(self, states: list[PartitionState]) -> list[Work]:
        if not self._holds.waiting():
            return []
        stopping = {id(state) for state in states}
        return self._holds.withdraw(lambda work: id(work[0]) not in stopping)


def _held(state: PartitionState, entry: Any) -> Held:
    if entry.ordered:
        return (state.topic, state.partition, True, entry.key)
    return (state.topic, state.partition, False, entry.offset)
