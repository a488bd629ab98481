"""``keyshared demo --spark``: park a key with the live consumer, replay it with Spark, resume.

The story a user of the ``park`` policy lives through, end to end on a real broker:

1. Orders keyed by customer are consumed with ``poison="park"``; one customer's payment fails,
   so that order and every later order of the customer go to the DLQ, in order, while every
   other customer is served.
2. The bug is fixed. ``keyshared.spark`` plans the DLQ replay (whole keys, provenance decoded),
   sees the key is still parked, releases it, and writes the tail back to its source
   partition, in order, in one transaction per Spark task.
3. The consumer, restarted, handles the customer's remaining orders once, in their original
   order. The summary proves it; a failure exits non-zero.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from rich.console import Console

import keyshared
from keyshared.demo.clientlog import CLIENT_LOG
from keyshared.dev.topics import create_topic, delete_topics, unique_name
from keyshared.kafka.client_config import KEYED_PRODUCER

__all__ = ["SparkReplayOutcome", "run_spark_replay_demo"]

_WAIT_S = 120.0
_CUSTOMERS = 20
_ORDERS_PER_CUSTOMER = 10
_VICTIM = b"customer-7"
_POISON_SEQ = 4  # the victim's 4th order fails until the fix


@dataclass
class SparkReplayOutcome:
    """What the demo saw; ``ok`` when the victim's orders were handled once, in order."""

    handled: dict[bytes, list[int]] = field(default_factory=dict)
    dead_lettered: int = 0
    replayed: int = 0
    spark_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        expected = list(range(1, _ORDERS_PER_CUSTOMER + 1))
        return len(self.handled) == _CUSTOMERS and all(
            seqs == expected for seqs in self.handled.values()
        )


class _Shop:
    """The handler: a payment service whose bug declines one order until ``fixed``."""

    def __init__(self) -> None:
        self.fixed = False
        self.handled: dict[bytes, list[int]] = {}
        self._cond = threading.Condition()

    def __call__(self, record: keyshared.Record) -> None:
        seq = int(record.value)
        if record.key == _VICTIM and seq == _POISON_SEQ and not self.fixed:
            raise RuntimeError("card declined (a bug in the payment client)")
        with self._cond:
            self.handled.setdefault(record.key, []).append(seq)
            self._cond.notify_all()

    def wait_for(self, count: int) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: sum(map(len, self.handled.values())) >= count, _WAIT_S
            )


def _settled(bootstrap: str, topic: str, group: str, partitions: int) -> bool:
    """Wait until ``group`` committed every partition of ``topic`` to its end: every record
    handled or acknowledged in the DLQ (the condition for a replay, see ``keyshared.spark``)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "logger": CLIENT_LOG})
    try:
        ends = [consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps]
        deadline = time.monotonic() + _WAIT_S
        while time.monotonic() < deadline:
            committed = [tp.offset for tp in consumer.committed(tps, timeout=10)]
            if committed == ends:
                return True
            time.sleep(0.1)  # polling the broker's committed offsets, not a stand-in for a sync
        return False
    finally:
        consumer.close()


def _consume(
    bootstrap: str, topic: str, group: str, shop: _Shop, count: int, partitions: int
) -> bool:
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group}, [topic], shop, workers=8,
        poison="park", retry=keyshared.RetryPolicy(max_attempts=2, initial_backoff=0.05),
    )  # fmt: skip
    thread = threading.Thread(target=consumer.run, name="demo-consumer", daemon=True)
    thread.start()
    try:
        return shop.wait_for(count) and _settled(bootstrap, topic, group, partitions)
    finally:
        consumer.stop()
        thread.join(_WAIT_S)


def run_spark_replay_demo(
    bootstrap: str, console: Console, master: str = "local[2]"
) -> SparkReplayOutcome:
    """Run the story on ``bootstrap``; topics are created and deleted by the demo."""
    from keyshared.spark import parked_keys, plan_replay, read_dlq, release_keys, replay
    from keyshared.spark.session import spark_session

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = unique_name("demo-orders")
    dlq = f"{topic}.dlq"
    group = unique_name("demo-shop")
    create_topic(admin, topic, 3)
    create_topic(admin, dlq, 3)
    outcome = SparkReplayOutcome()
    try:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "logger": CLIENT_LOG,
                **KEYED_PRODUCER,
            }
        )
        for seq in range(1, _ORDERS_PER_CUSTOMER + 1):
            for c in range(_CUSTOMERS):
                producer.produce(topic, key=b"customer-%d" % c, value=str(seq).encode())
        producer.flush(_WAIT_S)
        total = _CUSTOMERS * _ORDERS_PER_CUSTOMER
        tail = _ORDERS_PER_CUSTOMER - _POISON_SEQ + 1
        shop = _Shop()
        console.print(f"1. Consuming {total} orders with poison='park' ...")
        _consume(bootstrap, topic, group, shop, total - tail, 3)
        console.print(f"   {_VICTIM.decode()} is parked at order {_POISON_SEQ}; its tail of "
                      f"{tail} orders went to {dlq}; the other customers were served.")  # fmt: skip

        console.print(f"2. Bug fixed. Replaying {dlq} with Spark ({master}) ...")
        began = time.monotonic()
        spark = spark_session(master, app_name="keyshared demo --spark", shuffle_partitions=4)
        decoded = read_dlq(spark, bootstrap, dlq)
        outcome.dead_lettered = decoded.count()
        held = parked_keys(bootstrap, [group])
        console.print(f"   {len(held)} key(s) still parked: releasing them first.")
        release_keys(bootstrap, held)
        result = replay(plan_replay(decoded), bootstrap, partitions=4)
        outcome.replayed = result.written
        outcome.spark_seconds = time.monotonic() - began
        console.print(
            f"   replayed {result.written} records in per-key order (run {result.run_id}, "
            f"{outcome.spark_seconds:.1f}s with Spark start)."
        )

        shop.fixed = True
        console.print("3. Restarting the consumer ...")
        _consume(bootstrap, topic, group, shop, total, 3)
        outcome.handled = shop.handled
    finally:
        delete_topics(admin, [topic, dlq, f"keyshared.keys.{group}"])
    victim = outcome.handled.get(_VICTIM, [])
    mark = "[green]✓[/]" if outcome.ok else "[red]✗[/]"
    verdict = "once each, in their original order." if outcome.ok else "NOT in order."
    console.print(f"{mark} {_VICTIM.decode()}'s orders were handled as {victim}: {verdict}")
    return outcome
