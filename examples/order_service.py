"""Order processing: each order's events (created -> paid -> shipped) in order, orders in parallel.

Run against the local cluster (one command)::

    eval "$(keyshared dev up)" && python examples/order_service.py --orders 2000

What it shows: the key is the order id, so an order's events are handled one after another while
thousands of orders proceed in parallel on 32 workers. The handler does I/O (a simulated 5 ms
database call) and checks each order's state machine: an event out of order would raise. Orders
whose payment is malformed fail every attempt and go to the DLQ (``orders.dlq``) with provenance
headers, while later events of other orders keep flowing. The service stops once every event of
this run is handled (or on Ctrl-C) and prints one summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
import uuid

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

import keyshared

NEXT_STATE = {"created": None, "paid": "created", "shipped": "paid"}
MAX_ATTEMPTS = 3


class OrderService:
    """Applies order events to an order table (a dict standing in for a database)."""

    def __init__(self, run_id: str, expected: int, db_latency_s: float) -> None:
        self.run_id = run_id
        self.expected = expected
        self.db_latency_s = db_latency_s
        self.state: dict[str, str] = {}
        self.handled = 0
        self.failed_final = 0
        self.bad_transitions = 0
        self.failed_orders: set[str] = set()
        self.done = threading.Event()
        self._lock = threading.Lock()

    def handle(self, record: keyshared.Record) -> None:
        event = json.loads(record.value)
        if event["run"] != self.run_id:
            return  # an event of an earlier run of this example
        order = event["order"]
        if order in self.failed_orders:
            # Keep the order's tail with its failed event, so a DLQ replay stays in order.
            self._count(final_failure=True)
            raise keyshared.DoNotRetry(f"{order}: an earlier event is in the DLQ")
        try:
            self._apply(event)
        except ValueError:
            if record.attempt >= MAX_ATTEMPTS:
                with self._lock:
                    self.failed_orders.add(order)
                self._count(final_failure=True)
            raise
        self._count(final_failure=False)

    def _apply(self, event: dict[str, object]) -> None:
        if not isinstance(event.get("amount_cents"), int):
            raise ValueError(f"order {event['order']}: malformed amount {event['amount_cents']!r}")
        time.sleep(self.db_latency_s)  # the database write
        order, kind = str(event["order"]), str(event["type"])
        with self._lock:
            if self.state.get(order) != NEXT_STATE[kind]:
                self.bad_transitions += 1
            self.state[order] = kind

    def _count(self, final_failure: bool) -> None:
        with self._lock:
            self.handled += 1
            self.failed_final += final_failure
            if self.handled >= self.expected:
                self.done.set()


def ensure_topics(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [NewTopic(topic, partitions, 1), NewTopic(f"{topic}.dlq", 1, 1)]
    for future in admin.create_topics(wanted).values():
        try:
            future.result(30)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    time.sleep(1.0)  # let the new partitions elect their leader


def produce_orders(bootstrap: str, topic: str, run_id: str, orders: int, bad_every: int) -> int:
    """Three events per order, interleaved across orders as a real shop's would be."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    pending = {f"order-{run_id}-{n:05d}": ["created", "paid", "shipped"] for n in range(orders)}
    rng = random.Random(run_id)
    events = 0
    while pending:
        order = rng.choice(list(pending))
        kind = pending[order].pop(0)
        bad = bad_every > 0 and int(order[-5:]) % bad_every == bad_every - 1 and kind == "paid"
        value = {
            "run": run_id,
            "order": order,
            "type": kind,
            "amount_cents": "12,50" if bad else rng.randrange(100, 90_000),
        }
        producer.produce(topic, key=order.encode(), value=json.dumps(value).encode())
        producer.poll(0)
        events += 1
        if not pending[order]:
            del pending[order]
    producer.flush(30)
    return events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap-servers", default=os.environ.get("KEYSHARED_BOOTSTRAP_SERVERS")
    )
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--orders", type=int, default=2000)
    parser.add_argument(
        "--bad-every", type=int, default=500, help="every n-th payment is malformed"
    )
    parser.add_argument("--workers", type=int, default=32)
    args = parser.parse_args(argv)
    if not args.bootstrap_servers:
        parser.error('no Kafka: run `eval "$(keyshared dev up)"` or pass --bootstrap-servers')
    run_id = uuid.uuid4().hex[:8]
    ensure_topics(args.bootstrap_servers, args.topic, partitions=3)
    service = OrderService(run_id, expected=args.orders * 3, db_latency_s=0.005)
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": args.bootstrap_servers, "group.id": f"{args.topic}-service"},
        [args.topic],
        service.handle,
        workers=args.workers,
        poison="dead_letter",  # to f"{topic}.dlq", the default DLQ name
        retry=keyshared.RetryPolicy(max_attempts=MAX_ATTEMPTS, initial_backoff=0.05),
    )
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    signal.signal(signal.SIGINT, lambda *_: service.done.set())
    began = time.monotonic()
    events = produce_orders(args.bootstrap_servers, args.topic, run_id, args.orders, args.bad_every)
    service.done.wait()
    elapsed = time.monotonic() - began
    consumer.stop()
    thread.join(60)
    print(
        f"order-service: {service.handled}/{events} events of {args.orders} orders in "
        f"{elapsed:.1f} s; dead-lettered {service.failed_final} to {args.topic}.dlq; "
        f"out-of-order transitions {service.bad_transitions}"
    )
    return 0 if service.bad_transitions == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
