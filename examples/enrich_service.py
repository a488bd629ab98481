"""Consume -> enrich -> produce, exactly once: payments enriched with a (simulated) lookup.

Run against the local cluster (one command)::

    eval "$(keyshared dev up)" && python examples/enrich_service.py --payments 2000

What it shows: ``exactly_once=True``. The handler looks each payment's customer up (a simulated
2 ms call, in parallel on 32 workers, each customer's payments in order) and writes the
enriched payment through ``record.output.produce``: nothing reaches Kafka until the record is
finished, and then it goes out in the same Kafka transaction as the offset that marks it
finished. Payments with a malformed amount fail and are dead-lettered, in that transaction too.
After the run the output and the DLQ are read with ``isolation.level=read_committed`` and the
summary line counts duplicates (0) and per-customer order breaks (0).

With ``--zookeeper HOST:PORT`` (``keyshared dev up`` prints it as ``KEYSHARED_ZOOKEEPER``) it runs
in ``exclusive`` mode instead: two members, one active and one standby on a ZooKeeper lock. The
active member is stopped a third of the way through and the standby takes over. Both use the
group's one active-role ``transactional.id``, so the standby's activation fences the last active
member's producer at the broker before it reads the committed offsets: output stays exactly once
across the hand-over. (Exclusive mode blocks a failing customer rather than skip its payment,
so that run has no malformed payments.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

import keyshared
from coordinator import ZooKeeperCoordinator

REGIONS = ("eu", "us", "apac")


def enrich(record: keyshared.Record, out_topic: str) -> None:
    payment = json.loads(record.value)
    amount = float(payment["amount"])  # a malformed amount raises: retried, then dead-lettered
    time.sleep(0.002)  # the customer lookup
    customer = payment["customer"]
    enriched = {**payment, "amount": amount, "region": REGIONS[hash(customer) % len(REGIONS)]}
    assert record.output is not None  # exactly_once=True gives every record an output handle
    record.output.produce(
        out_topic,
        key=record.raw_key,
        value=json.dumps(enriched).encode(),
        headers=[("source", f"{record.partition}:{record.offset}".encode())],
    )


def ensure_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=10).topics
    wanted = [NewTopic(n, partitions) for n in names if n not in existing]
    for future in admin.create_topics(wanted).values() if wanted else ():
        future.result(30)


def produce_payments(bootstrap: str, topic: str, run_id: str, count: int, bad_every: int) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    customers = [f"{run_id}-c{i}" for i in range(max(1, count // 10))]
    seq: Counter[str] = Counter()
    bad = 0
    for n in range(count):
        customer = random.choice(customers)
        seq[customer] += 1
        amount: object = round(random.uniform(1, 500), 2)
        if bad_every and n % bad_every == bad_every - 1:
            amount, bad = "twelve", bad + 1
        value = {"customer": customer, "seq": seq[customer], "amount": amount}
        producer.produce(topic, key=customer.encode(), value=json.dumps(value).encode())
        producer.poll(0)
    producer.flush(30)
    return bad


def read_committed(bootstrap: str, topic: str, run_id: str, expected: int) -> list[dict]:
    """This run's messages of ``topic`` as a read_committed consumer sees them."""
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    parts = reader.list_topics(topic, timeout=10).topics[topic].partitions
    reader.assign([TopicPartition(topic, p, 0) for p in parts])
    found: list[dict] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        len(found) >= expected and len(at_end) == len(parts)
    ):
        msg = reader.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None:
            at_end.add(msg.partition())
            continue
        at_end.discard(msg.partition())
        value = json.loads(msg.value())
        if value["customer"].startswith(run_id):
            found.append(value)
    reader.close()
    return found


class HandOver:
    """Stops whichever member is active once it has enriched ``after`` payments; the standby
    takes over. ``said`` is the summary's note on it."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.members: dict[str, keyshared.KeySharedConsumer] = {}
        self.said = "; exclusive: no hand-over (too few payments)"
        self._handled: Counter[str] = Counter()
        self._lock = threading.Lock()

    def count(self, name: str) -> None:
        with self._lock:
            self._handled[name] += 1
            if self._handled[name] == self.after and "no hand-over" in self.said:
                other = next(n for n in self.members if n != name)
                self.said = (
                    f"; exclusive: {name} stopped after {self.after} payments, {other} took over"
                )
                threading.Thread(target=self.members[name].stop).start()


def exclusive_pair(
    bootstrap: str, zookeeper: str, group: str, topic: str, out_topic: str, workers: int,
    hand_over: HandOver,
) -> list[keyshared.KeySharedConsumer]:  # fmt: skip
    """Two exclusive members: one active, one standby, on the group's ZooKeeper lock."""

    def handler(name: str) -> Callable[[keyshared.Record], None]:
        def handle(record: keyshared.Record) -> None:
            enrich(record, out_topic)
            hand_over.count(name)

        return handle

    for name in ("a", "b"):
        hand_over.members[name] = keyshared.KeySharedConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name},
            [topic],
            handler(name),
            coordinator=ZooKeeperCoordinator(zookeeper, session_timeout=6),
            mode="exclusive",
            workers=workers,
            exactly_once=True,
        )
    return list(hand_over.members.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default=os.environ.get(
        "KEYSHARED_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))  # fmt: skip
    parser.add_argument("--topic", default="payments")
    parser.add_argument("--payments", type=int, default=2000)
    parser.add_argument("--bad-every", type=int, default=500)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument(
        "--zookeeper",
        default=os.environ.get("KEYSHARED_ZOOKEEPER"),
        help="exclusive mode: an active member and a standby, with a hand-over",
    )
    args = parser.parse_args(argv)
    if args.zookeeper:
        args.bad_every = 0
    bootstrap, topic = args.bootstrap_servers, args.topic
    out_topic, dlq_topic = f"{topic}.enriched", f"{topic}.dlq"
    ensure_topics(bootstrap, [topic, out_topic, dlq_topic], 3)
    run_id = uuid.uuid4().hex[:8]
    bad = produce_payments(bootstrap, topic, run_id, args.payments, args.bad_every)
    good = args.payments - bad

    group = f"enrich-{run_id}"
    if args.zookeeper:
        hand_over = HandOver(args.payments // 3)
        consumers = exclusive_pair(bootstrap, args.zookeeper, group, topic, out_topic,
                                   args.workers, hand_over)  # fmt: skip
    else:
        consumers = [keyshared.KeySharedConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group},
            [topic],
            lambda record: enrich(record, out_topic),
            workers=args.workers,
            exactly_once=True,
            poison="dead_letter",
            retry=keyshared.RetryPolicy(max_attempts=2, initial_backoff=0.01),
        )]  # fmt: skip

    def stop_all(*_: object) -> None:
        for consumer in consumers:
            consumer.stop()

    signal.signal(signal.SIGINT, stop_all)
    runners = [threading.Thread(target=c.run) for c in consumers]
    for runner in runners:
        runner.start()
    enriched = read_committed(bootstrap, out_topic, run_id, good)
    handed_over = hand_over.said if args.zookeeper else ""
    letters = read_committed(bootstrap, dlq_topic, run_id, bad)
    stop_all()
    for runner in runners:
        runner.join()

    ids = Counter((p["customer"], p["seq"]) for p in enriched)
    duplicates = sum(n - 1 for n in ids.values())
    by_customer: dict[str, list[int]] = defaultdict(list)
    for payment in enriched:
        by_customer[payment["customer"]].append(payment["seq"])
    order_breaks = sum(1 for seqs in by_customer.values() if seqs != sorted(seqs))
    print(
        f"enriched {len(ids)}/{good} payments to {out_topic}, dead-lettered {len(letters)}/{bad} "
        f"to {dlq_topic}; duplicates {duplicates}, per-customer order breaks {order_breaks}"
        f"{handed_over}"
    )
    ok = len(ids) == good and len(letters) == bad and not duplicates and not order_breaks
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
