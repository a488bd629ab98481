"""The demo's orders: keyed by customer, numbered per customer, a few hot customers and poison.

Each record is one order event of a customer (the key), with ``seq`` counting that customer's
orders from 0, so the consumer side can check per-key order and completeness exactly. A few
customers are *hot* (a large share of the traffic, like a marketplace's big sellers), and every
``poison_every``-th order carries a card the payment gateway always declines (a poison record).
"""

from __future__ import annotations

import functools
import json
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import Producer

from keyshared.demo.clientlog import CLIENT_LOG
from keyshared.kafka.client_config import KEYED_PRODUCER

__all__ = ["Order", "OrderWorkload", "ProducedSet", "customer_key"]

HOT_CUSTOMERS = 3
HOT_SHARE = 0.06  # of all orders, split over the hot customers (2% each by default)


def customer_key(index: int) -> str:
    return f"customer-{index:05d}"


@dataclass(frozen=True)
class Order:
    key: str
    seq: int
    poison: bool
    amount_cents: int

    def value(self) -> bytes:
        return json.dumps(
            {
                "order_id": f"{self.key}/{self.seq}",
                "customer": self.key,
                "seq": self.seq,
                "amount_cents": self.amount_cents,
                "card": "4000-0000-0000-0002" if self.poison else "4242-4242-4242-4242",
                "poison": self.poison,
            }
        ).encode()


@dataclass
class ProducedSet:
    """What was acknowledged by the broker: orders per key (seqs 0..n-1) and poison ids."""

    per_key: dict[str, int] = field(default_factory=dict)
    poison: set[tuple[str, int]] = field(default_factory=set)
    acked: int = 0
    failed: int = 0

    @property
    def total(self) -> int:
        return sum(self.per_key.values())


class OrderWorkload:
    """Generates and produces the orders.

    :param records: orders in total.
    :param keys: distinct customers (hot ones included).
    :param poison_every: every n-th order is poison (0: none).
    :param seed: for a reproducible workload.
    """

    def __init__(self, records: int, keys: int, poison_every: int, seed: int = 42) -> None:
        self.records = records
        self.keys = keys
        self.poison_every = poison_every
        self._rng = random.Random(seed)
        self.produced = ProducedSet()
        self._lock = threading.Lock()

    def orders(self) -> Iterator[Order]:
        hot = min(HOT_CUSTOMERS, max(0, self.keys - 1))
        next_seq: dict[str, int] = {}
        for n in range(1, self.records + 1):
            if hot and self._rng.random() < HOT_SHARE:
                index = self._rng.randrange(hot)
            else:
                index = self._rng.randrange(hot, self.keys) if self.keys > hot else 0
            key = customer_key(index)
            seq = next_seq.get(key, 0)
            next_seq[key] = seq + 1
            poison = self.poison_every > 0 and n % self.poison_every == 0
            yield Order(key, seq, poison, self._rng.randrange(500, 50_000))

    def produce(self, bootstrap: str, topic: str) -> ProducedSet:
        """Produce every order, idempotently (no reordering on retries); wait for the acks."""
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 10,
                "logger": CLIENT_LOG,
                **KEYED_PRODUCER,
            }
        )
        for count, order in enumerate(self.orders(), start=1):
            producer.produce(
                topic,
                key=order.key.encode(),
                value=order.value(),
                on_delivery=functools.partial(self._acked, order),
            )
            if count % 500 == 0:
                producer.poll(0)
        remaining = producer.flush(60)
        if remaining:
            raise RuntimeError(f"{remaining} orders were not acknowledged by the broker in 60 s")
        return self.produced

    def _acked(self, order: Order, err: object, _msg: object) -> None:
        with self._lock:
            if err is not None:
                self.produced.failed += 1
                return
            self.produced.acked += 1
            self.produced.per_key[order.key] = max(
                self.produced.per_key.get(order.key, 0), order.seq + 1
            )
            if order.poison:
                self.produced.poison.add((order.key, order.seq))
