"""A slow handler never costs the group membership, and never holds up other keys (issue 4).

The poll thread keeps polling while a handler runs longer than ``max.poll.interval.ms``;
backpressure is pause/resume, so the member is never kicked out of the group.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import REGISTRY

import keyshared
from tests.kafka.support.journal import produce, wait_committed_to_end, wait_for

MAX_POLL_MS = 7000  # librdkafka wants it >= session.timeout.ms
SLOW_SECONDS = MAX_POLL_MS / 1000 + 2.5


def _config(bootstrap: str, group: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "max.poll.interval.ms": MAX_POLL_MS,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
    }


def _rebalances(consumer: keyshared.KeySharedConsumer, kind: str) -> float:
    value = REGISTRY.get_sample_value(
        "keyshared_rebalances_total",
        {"group": consumer.group, "member": consumer.member, "kind": kind},
    )
    return value or 0.0


@contextmanager
def _running(consumer: keyshared.KeySharedConsumer) -> Iterator[threading.Thread]:
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        assert consumer.wait_started(30)
        yield thread
    finally:
        consumer.stop()
        thread.join(60)
        assert not thread.is_alive(), "the consumer did not stop"


def test_handler_slower_than_max_poll_interval_keeps_membership(
    kafka_bootstrap: str, new_topic, new_group
) -> None:
    topic = new_topic(partitions=2)
    group = new_group("liveness")
    slow = b"slow"
    others = [f"key-{i:03d}".encode() for i in range(200)]
    produce(kafka_bootstrap, topic, [(slow, 1)] + [(k, 1) for k in others] + [(slow, 2)])

    lock = threading.Lock()
    finished: dict[tuple[bytes, int], float] = {}
    started: dict[tuple[bytes, int], float] = {}

    def handle(record: keyshared.Record) -> None:
        rid = (record.key, int(record.value))
        with lock:
            started[rid] = time.monotonic()
        if record.key == slow and rid[1] == 1:
            time.sleep(SLOW_SECONDS)  # the slow handler under test, not a synchronisation
        with lock:
            finished[rid] = time.monotonic()

    consumer = keyshared.KeySharedConsumer(
        _config(kafka_bootstrap, group),
        [topic],
        handle,
        workers=8,
        poison="drop",
        drain_timeout=5.0,  # shorter than max.poll.interval.ms, as keyshared requires
    )
    with _running(consumer):
        wait_for(lambda: (slow, 1) in started, 30, "the slow record to start")
        assigned = _rebalances(consumer, "assigned")
        # While the slow call runs, new records keep arriving and being processed.
        produce(kafka_bootstrap, topic, [(k, 2) for k in others])
        wait_for(lambda: (slow, 1) in finished, SLOW_SECONDS + 10, "the slow record")
        slow_end = finished[(slow, 1)]
        wait_for(lambda: len(finished) == 2 + 2 * len(others), 30, "every record")
        assert _rebalances(consumer, "revoked") == 0, "the member lost its partitions"
        assert _rebalances(consumer, "lost") == 0, "the member was kicked out of the group"
        assert _rebalances(consumer, "assigned") == assigned
        wait_committed_to_end(kafka_bootstrap, group, topic)

    during = [rid for rid, t in finished.items() if rid[1] == 2 and t < slow_end]
    print(
        f"second-batch records finished during the {SLOW_SECONDS:g}s call: "
        f"{len(during)}/{len(others)}"
    )
    assert len(during) >= len(others) // 2, "fetching and processing stalled during the slow call"
    assert started[(slow, 2)] >= slow_end, "the slow key's next record overtook it"


def test_slow_key_does_not_hold_up_other_keys(kafka_bootstrap: str, new_topic, new_group) -> None:
    """Every other key finishes while one key's handler is stuck (SPEC: never held up)."""
    topic = new_topic(partitions=1)
    group = new_group("slow-key")
    slow = b"slow"
    others = [f"key-{i:03d}".encode() for i in range(64)]
    produce(kafka_bootstrap, topic, [(slow, 1)] + [(k, s) for s in (1, 2, 3) for k in others])
    release = threading.Event()
    lock = threading.Lock()
    finished: set[tuple[bytes, int]] = set()

    def handle(record: keyshared.Record) -> None:
        if record.key == slow:
            release.wait(60)
        with lock:
            finished.add((record.key, int(record.value)))

    consumer = keyshared.KeySharedConsumer(
        _config(kafka_bootstrap, group),
        [topic],
        handle,
        workers=4,
        poison="drop",
        drain_timeout=5.0,
    )
    with _running(consumer):
        expected = 3 * len(others)

        def others_done() -> bool:
            with lock:
                return len(finished) >= expected

        try:
            wait_for(others_done, 10, "the other keys while one key is stuck")
        except AssertionError:
            with lock:
                waiting = {k for k in others} - {k for k, s in finished if s == 3}
                count = expected - len(finished)
            raise AssertionError(
                f"{count} records of {len(waiting)} other keys waited behind the stuck key "
                f"(e.g. {sorted(waiting)[:5]}): they share its worker thread"
            ) from None
        else:
            with lock:
                assert (slow, 1) not in finished, "the stuck call returned early"
        finally:
            release.set()  # before the stop, whose drain waits for the stuck call
        wait_for(lambda: (slow, 1) in finished, 10, "the released key")
