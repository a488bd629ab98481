"""``key_shared``: a key whose call outlived its member's session waits for it, alone.

When a member's ZooKeeper session expires it drops every partition at once (fencing), but a
handler already running goes on; the member cannot stop it. When the member takes the range
back, its re-read hands that record (or its key's next one) to a new window. Starting it then
would run one key twice at once in this process (issue 24, defect 5). Holding the whole re-read
back until the fenced handlers end, as an earlier fix did, stalls every other key behind one
stuck handler, so it was reverted. Here the hold is per key (:class:`keyshared.core.stragglers.
KeyHolds`): the dispatcher reports each removed partition's running calls and each end of one,
and asks before starting a record; only records of a key with a fenced call still running wait,
in their window, counted as running, and start when it ends.

A record that was in its retry backoff when its partition was fenced is not running, but its
key is held too (nothing tells it apart in the window); that hold ends when nothing of the
fenced partition runs any more.

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
    """The dispatcher's hold (:class:`keyshared.kafka.seams.DispatchHold`) in ``key_shared``
    mode; called under the dispatcher's lock."""

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
