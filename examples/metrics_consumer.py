"""A long-running consumer whose metrics the provisioned Prometheus and Grafana files scrape.

Run against the local cluster (one command; Ctrl-C stops it)::

    eval "$(keyshared dev up)" && python examples/metrics_consumer.py

It serves ``/metrics`` (and ``/hotkeys``, and the Kubernetes probes ``/healthz`` and
``/readyz``) on port 9464, the port ``grafana/prometheus/
prometheus.yml`` scrapes (replace its targets with ``127.0.0.1:9464`` for a local Prometheus, or
run Prometheus and Grafana as in ``grafana/README.md``), and feeds itself a steady stream of
sensor readings: variable handler latency, one hot sensor, and an occasional reading that always
fails and goes to the DLQ, so every dashboard row has something to show.
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

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

import keyshared


def ensure_topics(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(topic, 3, 1), NewTopic(f"{topic}.dlq", 1, 1)]
    ).values():
        try:
            future.result(30)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    time.sleep(1.0)  # let new partitions elect a leader


def feed(bootstrap: str, topic: str, rate: float, stop: threading.Event) -> None:
    """Readings of 200 sensors at ``rate`` a second; sensor-000 is hot; 1 in 500 is corrupt."""
    # murmur2_random: a sensor's readings land where a Java producer of the topic puts them
    # (librdkafka's default partitioner would split each sensor over two partitions).
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )
    rng = random.Random(3)
    sent = 0
    began = time.monotonic()
    while not stop.is_set():
        while sent < (time.monotonic() - began) * rate:
            sensor = "sensor-000" if rng.random() < 0.2 else f"sensor-{rng.randrange(1, 200):03d}"
            reading = {"sensor": sensor, "celsius": round(rng.gauss(21, 3), 2), "n": sent}
            if rng.random() < 0.002:
                reading["celsius"] = "NaN"
            producer.produce(topic, key=sensor, value=json.dumps(reading))
            sent += 1
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(10)


def handle(record: keyshared.Record) -> None:
    reading = json.loads(record.value)
    if not isinstance(reading["celsius"], float):
        raise ValueError(f"{reading['sensor']}: unreadable value {reading['celsius']!r}")
    time.sleep(random.uniform(0.002, 0.02))  # write to a time-series store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap-servers", default=os.environ.get("KEYSHARED_BOOTSTRAP_SERVERS")
    )
    parser.add_argument("--topic", default="sensor-readings")
    parser.add_argument("--metrics-port", type=int, default=9464)
    parser.add_argument("--metrics-host", default="127.0.0.1", help="0.0.0.0 in a container")
    parser.add_argument("--rate", type=float, default=200.0, help="readings per second")
    parser.add_argument("--seconds", type=float, default=None, help="stop after (default: Ctrl-C)")
    args = parser.parse_args(argv)
    if not args.bootstrap_servers:
        parser.error('no Kafka: run `eval "$(keyshared dev up)"` or pass --bootstrap-servers')
    ensure_topics(args.bootstrap_servers, args.topic)
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": args.bootstrap_servers, "group.id": f"{args.topic}-writer"},
        [args.topic],
        handle,
        workers=16,
        poison="dead_letter",
        retry=keyshared.RetryPolicy(max_attempts=2, initial_backoff=0.1),
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
    )
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    consumer.wait_started(60)
    print(f"metrics: {consumer.metrics_url}", flush=True)
    base = str(consumer.metrics_url).rsplit("/", 1)[0]
    print(f"probes: {base}/healthz (liveness) {base}/readyz (readiness)", flush=True)
    print(f"prometheus target: {args.metrics_host}:{args.metrics_port} (job keyshared)", flush=True)
    feeder = threading.Thread(
        target=feed, args=(args.bootstrap_servers, args.topic, args.rate, stop), daemon=True
    )
    feeder.start()
    stop.wait(args.seconds)
    stop.set()
    feeder.join(30)
    consumer.stop()
    thread.join(60)
    print("metrics-consumer: stopped after draining and committing", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
