"""Park a poisoned key with the live consumer, fix the bug, replay its DLQ tail with Spark.

Run against the local cluster (one command; needs ``pip install keyshared[spark]``)::

    eval "$(keyshared dev up)" && python examples/spark_replay.py

What it shows: a payment for one account fails, and with ``poison="park"`` that payment and
every later payment of the account go to the DLQ, in order, while other accounts keep flowing.
Once the bug is "fixed", ``keyshared.spark`` replays the DLQ: it releases the parked key, writes
its payments back to their source partition in their original order (one Kafka transaction per
Spark task, so a retried task cannot duplicate them), and the restarted consumer applies them.
The account's balance history is checked at the end: every payment once, in order.
The same replay from a shell: ``keyshared dlq replay -d <topic>.dlq --release``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

import keyshared
from keyshared.spark import parked_keys, plan_replay, read_dlq, release_keys, replay, spark_session

ACCOUNTS, PAYMENTS, PARTITIONS = 10, 6, 3
BROKEN = b"account-3"


class Ledger:
    """Applies payments per account; the account's 3rd payment fails until ``fixed``."""

    def __init__(self) -> None:
        self.fixed = False
        self.applied: dict[bytes, list[int]] = {}
        self.cond = threading.Condition()

    def __call__(self, record: keyshared.Record) -> None:
        n = int(record.value)
        if record.key == BROKEN and n == 3 and not self.fixed:
            raise RuntimeError("payment gateway rejected the request")
        with self.cond:
            self.applied.setdefault(record.key, []).append(n)
            self.cond.notify_all()

    def total(self) -> int:
        return sum(map(len, self.applied.values()))


def consume_until(bootstrap: str, topic: str, group: str, ledger: Ledger, count: int) -> None:
    """Run a consumer until ``count`` payments are applied and the group committed to the end
    (so every dead letter is acknowledged), then stop it."""
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group}, [topic], ledger, workers=4,
        poison="park", retry=keyshared.RetryPolicy(max_attempts=2, initial_backoff=0.05),
    )  # fmt: skip
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    with ledger.cond:
        ledger.cond.wait_for(lambda: ledger.total() >= count, 120)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    ends = [probe.get_watermark_offsets(tp, timeout=10)[1] for tp in tps]
    deadline = time.monotonic() + 60
    while [tp.offset for tp in probe.committed(tps, timeout=10)] != ends:
        if time.monotonic() > deadline:
            sys.exit("the consumer did not commit to the end within 60 s")
        time.sleep(0.1)  # polling the broker for the committed offsets
    probe.close()
    consumer.stop()
    thread.join(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap-servers", default=os.environ.get("KEYSHARED_BOOTSTRAP_SERVERS")
    )
    parser.add_argument("--master", default="local[2]", help="Spark master")
    args = parser.parse_args()
    if not args.bootstrap_servers:
        sys.exit("give --bootstrap-servers or set KEYSHARED_BOOTSTRAP_SERVERS")
    bootstrap, run = args.bootstrap_servers, uuid.uuid4().hex[:8]
    topic, group = f"payments-{run}", f"ledger-{run}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in (topic, f"{topic}.dlq"):
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n in range(1, PAYMENTS + 1):
        for a in range(ACCOUNTS):
            producer.produce(topic, key=b"account-%d" % a, value=str(n).encode())
    producer.flush(30)

    ledger = Ledger()
    tail = PAYMENTS - 2  # the failing payment and every later one of the account
    consume_until(bootstrap, topic, group, ledger, ACCOUNTS * PAYMENTS - tail)
    print(f"parked {BROKEN.decode()} at payment 3: {tail} payments in {topic}.dlq")

    ledger.fixed = True  # the bug is fixed: replay the DLQ
    spark = spark_session(args.master, shuffle_partitions=4)
    plan = plan_replay(read_dlq(spark, bootstrap, f"{topic}.dlq"))
    release_keys(bootstrap, parked_keys(bootstrap, [group]))  # or `keyshared release`
    result = replay(plan, bootstrap)
    print(f"replayed {result.written} payments with Spark (run {result.run_id})")

    consume_until(bootstrap, topic, group, ledger, ACCOUNTS * PAYMENTS)
    history = ledger.applied[BROKEN]
    ok = all(ledger.applied[k] == list(range(1, PAYMENTS + 1)) for k in ledger.applied)
    print(f"{BROKEN.decode()} payments applied: {history} -> {'in order' if ok else 'BROKEN'}")
    sys.exit(0 if ok and len(ledger.applied) == ACCOUNTS else 1)


if __name__ == "__main__":
    main()
