"""Time quixstreams on a bench topic; run as a script by an interpreter that has quixstreams.

Why a separate script: quixstreams pins ``confluent-kafka<2.13`` while keyshared needs 2.16, so
the two usually live in different environments. This file imports nothing from keyshared, takes
its arguments on the command line and prints one JSON line: ``{"records", "seconds", "every",
"marks"}``, timed like keyshared's ``Tally`` (first handler start to the N-th finish, and the
time of every ``every``-th completion since that start, for the steady-state figure; see
``keyshared/bench/steady.py``).

    python quix_worker.py BOOTSTRAP TOPIC GROUP RECORDS HANDLER_SECONDS
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from typing import Any

__all__ = ["main"]


def main(argv: list[str]) -> int:
    bootstrap, topic_name, group, records_text, handler_text = argv
    records, handler_s = int(records_text), float(handler_text)
    from quixstreams import Application

    state = {"count": 0, "first": 0.0, "last": 0.0}
    every = max(1, records // 1000)  # keyshared.bench.steady.mark_every
    marks: list[float] = []
    app: Any = None

    def handle(value: Any) -> None:
        if state["count"] == 0:
            state["first"] = time.monotonic()
        if handler_s > 0:
            time.sleep(handler_s)
        state["count"] += 1
        if state["count"] % every == 0 and state["count"] <= records:
            marks.append(round(time.monotonic() - state["first"], 6))
        if state["count"] == records:
            state["last"] = time.monotonic()
            app.stop()

    with tempfile.TemporaryDirectory() as state_dir:
        app = Application(
            broker_address=bootstrap,
            consumer_group=group,
            auto_offset_reset="earliest",
            auto_create_topics=False,
            state_dir=state_dir,
            loglevel="WARNING",
        )
        topic = app.topic(topic_name, value_deserializer="bytes", key_deserializer="bytes")
        app.dataframe(topic).update(handle)
        app.run()
    seconds = state["last"] - state["first"]
    print(
        json.dumps(
            {"records": int(state["count"]), "seconds": seconds, "every": every, "marks": marks}
        )
    )
    return 0 if state["count"] >= records else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
