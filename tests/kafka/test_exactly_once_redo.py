"""An exactly-once redo never runs a key twice at once (nor two records of exclusive's lane).

A failed transaction makes the member drop its partitions' states and rebuild them from the
committed offsets (the redo), while handlers of the dropped states may still run. The rebuilt
window hands the same records to the workers again; starting one whose key still runs in the
dropped state would run one key twice at once, and in ``exclusive`` mode two records of the
partition's one serial lane. Here the transaction fails because the test fences the member's
producer (a second producer of its ``transactional.id``) while a slow record runs.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import Producer

from keyshared import RetryPolicy
from tests.kafka.support.journal import produce, wait_for
from tests.kafka.test_exactly_once import _committed_to_end, eos_member

SLOW_SECONDS = 6.0


class Calls:
    """Every handler call's (key, seq, start, end), from the handler's own clock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[bytes | None, int, float, float]] = []
        self.slow_started = threading.Event()

    def overlaps(self, same_lane: bool) -> list[str]:
        """Pairs of calls that ran at once: of one key, or (``same_lane``) of any key."""
        by_lane: dict[object, list[tuple[float, float, bytes | None, int]]] = defaultdict(list)
        with self.lock:
            for key, seq, start, end in self.calls:
                by_lane[None if same_lane else key].append((start, end, key, seq))
        found = []
        for calls in by_lane.values():
            calls.sort()
            latest = calls[0]  # the call that ends last among those started so far
            for call in calls[1:]:
                start, end, key, seq = call
                if start < latest[1]:
                    found.append(
                        f"{latest[2]!r}#{latest[3]} ran until {latest[1]:.3f}, "
                        f"{key!r}#{seq} started {start:.3f}"
                    )
                if end > latest[1]:
                    latest = call
        return found


@pytest.mark.parametrize("mode", ["partition", "exclusive"])
def test_a_redo_waits_for_the_calls_of_the_state_it_replaces(
    kafka_bootstrap: str, new_topic, new_group, mode: str
) -> None:
    source = new_topic(partitions=1)
    out = new_topic(partitions=1)
    group = new_group("eos-redo")
    txn_id = f"redo-{uuid.uuid4().hex[:8]}"
    records = [(f"k{i % 10}".encode(), i) for i in range(60)]
    produce(kafka_bootstrap, source, [*records[:30], (b"slow", 1), *records[30:]])
    calls = Calls()

    def handle(record) -> None:  # type: ignore[no-untyped-def]
        start = time.monotonic()
        if record.raw_key == b"slow":
            calls.slow_started.set()
            time.sleep(SLOW_SECONDS)
        record.output.produce(out, key=record.raw_key, value=record.value)
        with calls.lock:
            calls.calls.append((record.raw_key, int(record.value), start, time.monotonic()))

    consumer = eos_member(kafka_bootstrap, group, source, handle, workers=8, mode=mode,
                          transactional_id=txn_id, retry=RetryPolicy(max_attempts=1))  # fmt: skip
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        wait_for(calls.slow_started.is_set, 60, "the slow record to start")
        fencer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": txn_id})
        fencer.init_transactions(30)  # the member's next transaction fails: a redo
        _committed_to_end(kafka_bootstrap, group, source, 90)
    finally:
        consumer.stop()
        thread.join(30)
    assert not thread.is_alive()
    with calls.lock:
        slow_calls = [c for c in calls.calls if c[0] == b"slow"]
    assert len(slow_calls) >= 2, f"no redo ran the slow record again: {slow_calls}"
    assert calls.overlaps(same_lane=mode == "exclusive") == []
