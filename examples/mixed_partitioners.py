"""Two producers with different partitioners split keys over partitions; keyshared notices.

Run against the local cluster (one command)::

    eval "$(keyshared dev up)" && python examples/mixed_partitioners.py

The same order keys are produced twice: once as a Python (librdkafka) producer does by default
(``consistent_random``, CRC32 of the key), once as a Java producer does (murmur2; here
``partitioner=murmur2_random``). Most keys then live in two partitions, and no consumer can keep
their order. The consumer counts the keys it finds split (a sample: one key in 16) in
``keyshared_keys_split_across_partitions_total`` and logs one warning with the fix; the last
line compares that with the truth from the producers' delivery reports.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from prometheus_client import REGISTRY

import keyshared

METRIC = "keyshared_keys_split_across_partitions_total"


def produce(bootstrap: str, topic: str, keys: list[bytes], partitioner: str) -> dict[bytes, int]:
    """Each key once with ``partitioner``; the partition each landed in."""
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": partitioner})
    landed: dict[bytes, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            landed[msg.key()] = msg.partition()

    for key in keys:
        producer.produce(topic, key=key, value=b"{}", on_delivery=delivered)
    producer.flush(60)
    return landed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--topic", default=f"mixed-{uuid.uuid4().hex[:8]}")
    args = parser.parse_args()
    bootstrap = os.environ.get("KEYSHARED_BOOTSTRAP_SERVERS")
    if not bootstrap:
        print('set KEYSHARED_BOOTSTRAP_SERVERS (eval "$(keyshared dev up)")', file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(args.topic, 6, 1)])[args.topic].result(30)

    keys = [b"order-%d" % i for i in range(args.keys)]
    python_default = produce(bootstrap, args.topic, keys, "consistent_random")
    java_like = produce(bootstrap, args.topic, keys, "murmur2_random")
    split = sum(1 for k in keys if python_default[k] != java_like[k])

    handled = threading.Semaphore(0)
    group = f"{args.topic}-group"
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "client.id": group},
        [args.topic],
        lambda record: handled.release(),
        workers=8,
    )
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    for _ in range(2 * len(keys)):
        if not handled.acquire(timeout=60):
            print("records did not arrive within 60 s", file=sys.stderr)
            return 1
    labels = {"group": group, "member": group, "topic": args.topic}
    deadline = time.monotonic() + 5  # counted with the once-a-second gauge sampling
    found = 0.0
    while time.monotonic() < deadline and not found:
        found = REGISTRY.get_sample_value(METRIC, labels) or 0.0
        time.sleep(0.1)
    consumer.stop()
    thread.join(60)
    admin.delete_topics([args.topic])
    print(
        f"{split} of {len(keys)} keys landed in two partitions; keyshared found {found:.0f} of "
        f"them (it checks one key in 16)",
        flush=True,
    )
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
