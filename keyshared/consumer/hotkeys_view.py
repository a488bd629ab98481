"""The ``/hotkeys`` JSON: busiest and slowest keys per partition, without labelling metrics by key.

Keys never become metric labels (unbounded cardinality); they are shown here instead, as text
when they are UTF-8 and as hex otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from keyshared.core.redaction import Redactor, redacted
from keyshared.metrics.server import key_text

if TYPE_CHECKING:
    from keyshared.kafka.poll_loop import PollLoop

__all__ = ["hot_keys_report", "render_key"]


def render_key(key: bytes | None, redact: Redactor | None = None) -> str:
    """A key for people (see :func:`keyshared.metrics.key_text`); ``<null>`` for no key.
    ``redact`` is ``ConsumerOptions.redact``: the view is served over HTTP."""
    text = key_text(key)
    return "<null>" if text is None else redacted(text, redact)


def _top(
    ranked: list[tuple[bytes, float, float]], redact: Redactor | None
) -> list[dict[str, object]]:
    return [
        {"key": render_key(key, redact), "weight": round(count, 6), "error": round(err, 6)}
        for key, count, err in ranked
    ]


def hot_keys_report(
    loop: PollLoop | None, n: int = 10, redact: Redactor | None = None
) -> dict[str, object]:
    if loop is None:
        return {"partitions": []}
    partitions = []
    for state in list(loop.states.values()):
        busiest, slowest = state.stats.top(n)
        partitions.append(
            {
                "topic": state.topic,
                "partition": state.partition,
                "hottest_share": round(state.stats.hot_key_share(), 6),
                "busiest": _top(busiest, redact),
                "slowest_seconds": _top(slowest, redact),
                "blocked": [render_key(k, redact) for k in list(state.blocked_keys())],
                "parked": [render_key(k, redact) for k in list(state.parked)],
            }
        )
    return {"partitions": partitions}
