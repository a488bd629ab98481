"""Measure resident memory per buffered record in a fresh process (``python -m`` this module).

Why a separate process: RSS only grows in a long-lived process (freed memory is rarely returned
to the OS), so each measurement starts from a clean interpreter. Protocol on stdout/stdin:

1. the probe subscribes, waits for its assignment, prints ``ready``;
2. the parent produces ``RECORDS`` records and writes a line to stdin;
3. the probe fills its buffer (keyshared: the window, with every handler blocked until released;
   raw: a list of consumed messages), then prints one JSON line and exits.

    python -m keyshared.bench.memory_probe keyshared|raw|stuck BOOTSTRAP TOPIC RECORDS WORKERS

``stuck`` is keyshared with default window settings and the handler of one key (the first
record's) blocked for good while every other record succeeds at once: the memory it takes is
what ``max_window`` must bound, since the stuck record pins the cursor.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from typing import Any

from confluent_kafka import Consumer
from prometheus_client import REGISTRY

__all__ = ["gauge_sum", "main", "rss_bytes"]

_TIMEOUT_S = 180.0


def rss_bytes() -> int:
    """Resident set size of this process now (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def gauge_sum(name: str) -> float:
    """Sum of every series of a metric in the default registry."""
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == name
    )


def _ready_then_wait() -> int:
    gc.collect()
    before = rss_bytes()
    print("ready", flush=True)
    sys.stdin.readline()
    return before


def _raw(bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"mem-raw-{topic}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    while not consumer.assignment():
        consumer.consume(1, 0.2)
    before = _ready_then_wait()
    kept: list[Any] = []
    deadline = time.monotonic() + _TIMEOUT_S
    while len(kept) < records and time.monotonic() < deadline:
        kept.extend(m for m in consumer.consume(1000, 0.5) if m.error() is None)
    time.sleep(1.0)
    gc.collect()
    after = rss_bytes()
    consumer.close()
    return {"before": before, "after": after, "entries": len(kept)}


def _start(consumer: Any) -> tuple[threading.Thread, float]:
    """Run ``consumer`` on a thread until it has its assignment; also the probe's deadline."""
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + _TIMEOUT_S
    while gauge_sum("keyshared_rebalances_total") < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    return thread, deadline


def _keyshared(bootstrap: str, topic: str, records: int, workers: int) -> dict[str, Any]:
    from keyshared.consumer.key_shared_consumer import KeySharedConsumer

    release = threading.Event()
    consumer = KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": f"mem-ks-{topic}"},
        [topic],
        lambda record: release.wait(),
        workers=workers,
        max_window=records,
        per_worker_capacity=records,
    )
    thread, deadline = _start(consumer)
    before = _ready_then_wait()
    entries = 0.0
    while entries < records and time.monotonic() < deadline:
        time.sleep(0.2)
        entries = gauge_sum("keyshared_partition_in_flight") + gauge_sum(
            "keyshared_partition_waiting"
        )
    time.sleep(1.0)
    gc.collect()
    after = rss_bytes()
    release.set()
    consumer.stop()
    thread.join(60)
    return {"before": before, "after": after, "entries": int(entries)}


def _stuck(bootstrap: str, topic: str, records: int, workers: int) -> dict[str, Any]:
    from keyshared.consumer.key_shared_consumer import KeySharedConsumer

    release = threading.Event()
    stuck_key: list[bytes | None] = []

    def handle(record: Any) -> None:
        if not stuck_key:
            stuck_key.append(record.key)
        if record.key == stuck_key[0]:
            release.wait()

    consumer = KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": f"mem-stuck-{topic}"},
        [topic],
        handle,
        workers=workers,
    )
    thread, deadline = _start(consumer)
    before = _ready_then_wait()
    received, still_since = 0.0, time.monotonic()
    while received < records and time.monotonic() < deadline:
        time.sleep(0.2)
        now_received = gauge_sum("keyshared_records_received_total")
        if now_received != received:
            received, still_since = now_received, time.monotonic()
        elif time.monotonic() - still_since > 5.0:
            break  # paused: the window is full behind the stuck record
    gc.collect()
    after = rss_bytes()
    cursor = gauge_sum("keyshared_partition_safe_cursor_offset")
    release.set()
    consumer.stop()
    thread.join(60)
    return {"before": before, "after": after, "entries": int(received), "cursor": cursor}


def main(argv: list[str]) -> int:
    mode, bootstrap, topic, records_text, workers_text = argv
    records = int(records_text)
    if mode == "raw":
        result = _raw(bootstrap, topic, records)
    elif mode == "stuck":
        result = _stuck(bootstrap, topic, records, int(workers_text))
    else:
        result = _keyshared(bootstrap, topic, records, int(workers_text))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
