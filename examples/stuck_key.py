"""One key's handler hangs (a dead downstream for one customer); every other key keeps flowing.

Run against the local cluster (one command)::

    eval "$(keyshared dev up)" && python examples/stuck_key.py --records 50000

The first record's key (``customer-stuck``) waits on an event until the end; ``--records``
records of other customers follow it on the same partition. keyshared holds back only that key
(and the committed offset, which must not pass an unfinished record): the others finish while
it hangs, the partition never pauses, and the commit carries what finished above the stuck
record as a few offset runs in its metadata, so a crash now would redo none of them. The
summary line shows how many finished during the hang, the committed offset and how many bytes
of metadata say the rest is done.

With ``--exactly-once`` (try ``--records 80000``) every other record writes an output in the
consumer's Kafka transactions, and ``--stuck-share`` of the records (5 % by default) belong to
the stuck customer, so its waiting records are holes all over the partition. Behind 4,000 holes
the finished set no longer fits Kafka's 4 KB commit metadata; the transaction then carries it
whole as a record of ``keyshared.finished.<group>`` and the metadata links it. The summary line
counts the other customers' outputs a ``read_committed`` reader sees while the customer hangs
(all of them), and says whether the commit links a side record.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

import keyshared
from keyshared.core.offsets import decode_finished, linked_record

STUCK = b"customer-stuck"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--topic", default=f"stuck-key-{uuid.uuid4().hex[:8]}")
    parser.add_argument(
        "--exactly-once",
        action="store_true",
        help="outputs in transactions; the stuck customer's records spread out",
    )
    parser.add_argument(
        "--stuck-share",
        type=float,
        default=0.05,
        help="with --exactly-once: the stuck customer's share of the records",
    )
    args = parser.parse_args()
    bootstrap = os.environ.get("KEYSHARED_BOOTSTRAP_SERVERS")
    if not bootstrap:
        print('set KEYSHARED_BOOTSTRAP_SERVERS (eval "$(keyshared dev up)")', file=sys.stderr)
        return 2
    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = f"{args.topic}.out"
    for topic in (args.topic, out):
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(args.topic, key=STUCK, value=b"charge")
    rng = random.Random(7)
    n = 0
    while n < args.records:
        if args.exactly_once and rng.random() < args.stuck_share:
            producer.produce(args.topic, key=STUCK, value=b"charge")
            continue
        producer.produce(args.topic, key=b"customer-%d" % rng.randrange(5_000), value=b"%d" % n)
        n += 1
        if n % 10_000 == 0:
            producer.poll(0)
    producer.flush(60)

    release = threading.Event()  # the stuck customer's downstream, down until the end
    finished = threading.Semaphore(0)
    group = f"{args.topic}-group"

    def handle(record: keyshared.Record) -> None:
        if record.key == STUCK:
            release.wait()
            return
        if record.output is not None:  # --exactly-once
            record.output.produce(out, key=record.raw_key, value=record.value)
        finished.release()

    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"},
        [args.topic],
        handle,
        workers=32,
        commit_interval=0.5,
        exactly_once=args.exactly_once,
    )
    runner = threading.Thread(target=consumer.run, daemon=True)
    runner.start()
    began = time.monotonic()
    for _ in range(args.records):
        if not finished.acquire(timeout=120):
            print("other customers' records stopped flowing", file=sys.stderr)
            return 1
    flowed = time.monotonic() - began
    time.sleep(1.5)  # two commit intervals: the periodic commit carries the finished runs
    visible = _outputs(bootstrap, out, args.records) if args.exactly_once else 0
    committed, metadata = _committed(bootstrap, group, args.topic)
    done = decode_finished(committed, metadata)
    release.set()
    consumer.stop()
    runner.join(60)
    print(
        f"{args.records}/{args.records} other records finished in {flowed:.1f}s while "
        f"{STUCK.decode()} hung; committed offset {committed} (the stuck record), "
        f"{len(done)} finished above it in {done.run_count} run(s), "
        f"{len(metadata)} bytes of commit metadata"
        + (
            f"; {visible}/{args.records} outputs visible (read_committed), "
            f"side record linked: {'yes' if linked_record(metadata) is not None else 'no'}"
            if args.exactly_once
            else ""
        )
    )
    return 0


def _outputs(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> int:
    """How many outputs a read_committed reader sees, once it saw ``expected`` or timed out."""
    reader = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"{topic}-reader",
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
    })  # fmt: skip
    reader.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    deadline = time.monotonic() + timeout
    try:
        while seen < expected and time.monotonic() < deadline:
            msg = reader.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
    finally:
        reader.close()
    return seen


def _committed(bootstrap: str, group: str, topic: str) -> tuple[int, str]:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tp = probe.committed([TopicPartition(topic, 0)], timeout=10)[0]
    finally:
        probe.close()
    return tp.offset, tp.metadata or ""


if __name__ == "__main__":
    raise SystemExit(main())
