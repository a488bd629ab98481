"""The ``/hotkeys`` JSON: busiest and slowest keys per partition, without labelling metrics by key.

Keys never become metric labels (unbounded cardinality); they are shown here instead, as text
when they are UTF-8 and as hex otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from keyshared.core.hotkeys import SpaceSaving
from keyshared.metrics.server import key_text

if TYPE_CHECKING:
    from keyshared.kafka.poll_loop import PollLoop

__all__ = ["hot_keys_report", "render_key"]


def render_key(key: bytes | None) -> str:
    """A key for people (see :func:`keyshared.metrics.key_text`); ``<null>`` for no key."""
    text = key_text(key)
    return "<null>" if text is None else text


def _top(sketch: SpaceSaving, n: int) -> list[dict[str, object]]:
    return [
        {"key": render_key(key), "weight": round(count, 6), "error": round(err, 6)}
        for key, count, err in sketch.top(n)
    ]


def hot_keys_report(loop: PollLoop | None, n: int = 10) -> dict[str, object]:
    if loop is None:
        return {"partitions": []}
    partitions = []
    for state in list(loop.states.values()):
        partitions.append(
            {
                "topic": state.topic,
                "partition": state.partition,
                "hottest_share": round(state.busiest.share_of_top(), 6),
                "busiest": _top(state.busiest, n),
                "slowest_seconds": _top(state.slowest, n),
                "blocked": [render_key(k) for k in list(state.blocked)],
                "parked": [render_key(k) for k in list(state.parked)],
            }
        )
    return {"partitions": partitions}
