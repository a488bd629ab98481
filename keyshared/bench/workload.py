"""Keyed test data for the scenarios: uniform and Zipf key streams, produced idempotently.

Why idempotent producing: without ``enable.idempotence`` a retried batch can land after a later
one and reorder a key's records at the source, which would make an order check meaningless.
"""

from __future__ import annotations

import bisect
import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence

from confluent_kafka import Producer

from keyshared.kafka.client_config import KEYED_PRODUCER

__all__ = [
    "SteadyProducer",
    "hottest",
    "key_name",
    "produce",
    "random_keys",
    "uniform_keys",
    "zipf_keys",
]

_PAD = b"x" * 80  # payload of about 100 bytes, a typical small event


def key_name(index: int) -> bytes:
    return f"key-{index:05d}".encode()


def uniform_keys(records: int, key_count: int) -> list[bytes]:
    """Round-robin over ``key_count`` keys: every key gets records // key_count records."""
    names = [key_name(i) for i in range(key_count)]
    return [names[i % key_count] for i in range(records)]


def random_keys(records: int, key_count: int, seed: int = 7) -> list[bytes]:
    """``records`` keys drawn uniformly at random (seeded) from ``key_count`` keys."""
    rng = random.Random(seed)
    names = [key_name(i) for i in range(key_count)]
    return [names[rng.randrange(key_count)] for _ in range(records)]


def zipf_keys(records: int, key_count: int, s: float, seed: int = 7) -> list[bytes]:
    """``records`` keys drawn from a Zipf law with exponent ``s`` over ``key_count`` keys."""
    weights = [1.0 / (rank**s) for rank in range(1, key_count + 1)]
    cumulative = list(itertools.accumulate(weights))
    total = cumulative[-1]
    rng = random.Random(seed)
    names = [key_name(i) for i in range(key_count)]
    return [
        names[min(bisect.bisect_left(cumulative, rng.random() * total), key_count - 1)]
        for _ in range(records)
    ]


def hottest(keys: Sequence[bytes]) -> tuple[bytes, int]:
    """The most frequent key and its record count."""
    key, count = Counter(keys).most_common(1)[0]
    return key, count


def produce(bootstrap: str, topic: str, keys: Iterable[bytes], partition: int | None = None) -> int:
    """Produce one ~100-byte record per key, in order, and wait for every acknowledgement."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            **KEYED_PRODUCER,
        }
    )
    count = 0
    for count, key in enumerate(keys, start=1):
        value = b'{"n":%d,"pad":"%s"}' % (count, _PAD)
        if partition is None:
            producer.produce(topic, key=key, value=value)
        else:
            producer.produce(topic, key=key, value=value, partition=partition)
        if count % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise RuntimeError(f"{remaining} records to {topic} were not acknowledged within 60 s")
    return count


class SteadyProducer:
    """Produces ``rate`` records a second over ``key_count`` keys until :meth:`stop`.

    Why a steady rate below every contender's capacity: then no backlog builds up, and what a
    rebalance scenario measures is the hand-over itself, not how long a backlog takes to drain.
    """

    def __init__(self, bootstrap: str, topic: str, rate: float, key_count: int) -> None:
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, **KEYED_PRODUCER}
        )
        self._topic, self._rate, self._key_count = topic, rate, key_count
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-producer", daemon=True)
        self.produced = 0

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        began = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - began) * self._rate)
            while self.produced < due:
                key = key_name(self.produced % self._key_count)
                self._producer.produce(self._topic, key=key, value=b'{"pad":"%s"}' % _PAD)
                self.produced += 1
            self._producer.poll(0)
            time.sleep(0.005)
        self._producer.flush(30)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
