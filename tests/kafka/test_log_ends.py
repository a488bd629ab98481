"""A log end read through a leader's crash (``keyshared/kafka/log_ends.py``), on the
three-broker topology.

Finding 29 (docs/chaos.md): a consumer that neither subscribes to a topic nor is assigned it
(``key_shared``'s low-watermark pass) asked a partition's end in a loop while the partition's
leader was SIGKILLed; librdkafka dropped the topic from its metadata cache and answered "Local:
Unknown partition" for the rest of the run. The same client, through :func:`log_end`, answers
once the new leader is elected. ``log_end`` replaced by a plain ``get_watermark_offsets`` call,
this test fails: no answer in the 60 s after the election.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from keyshared.dev.topics import create_topic, delete_topics, unique_name
from keyshared.dev.topology import TopologyCluster
from keyshared.kafka.log_ends import log_end

pytestmark = pytest.mark.timeout(300)

_ANSWER_WITHIN_S = 60.0  # after the new leader is elected: a client that is stuck never does


def test_a_partitions_end_is_read_again_after_its_leader_crashed(
    topology_cluster: TopologyCluster,
) -> None:
    servers = topology_cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": servers})
    topic = unique_name("ends")
    create_topic(admin, topic, 1, replication_factor=-1)  # RF 3, min ISR 2
    producer = Producer({"bootstrap.servers": servers, "acks": "all", "log_level": 2})
    consumer = Consumer({
        "bootstrap.servers": servers,
        "group.id": unique_name("ends"),
        "enable.auto.commit": False,
        "log_level": 2,
    })  # fmt: skip
    tp = TopicPartition(topic, 0)
    answers: list[tuple[float, int]] = []
    errors: list[str] = []
    stop = threading.Event()

    def ask() -> None:  # in a loop, as the pass does once it fails: through the crash
        while not stop.is_set():
            asked_at = time.monotonic()  # an answer counts from when it was asked
            try:
                answers.append((asked_at, log_end(consumer, tp, 5.0)))
            except KafkaException as exc:
                errors.append(exc.args[0].str())
            time.sleep(0.05)

    leader = topology_cluster.partition_leader(topic, 0)
    asker = threading.Thread(target=ask, daemon=True)
    try:
        for i in range(10):
            producer.produce(topic, str(i).encode(), partition=0)
        assert producer.flush(30) == 0
        asker.start()
        topology_cluster.stop_broker(leader, kill=True)
        for i in range(10, 15):
            producer.produce(topic, str(i).encode(), partition=0)
        assert producer.flush(60) == 0, "no new leader: the write did not go through"
        elected = time.monotonic()
        assert topology_cluster.partition_leader(topic, 0) != leader
        deadline = elected + _ANSWER_WITHIN_S
        while time.monotonic() < deadline and not any(t > elected for t, _ in answers):
            time.sleep(0.2)
        after = [end for t, end in answers if t > elected]  # asked after the writes landed
        assert after, (
            f"no answer in the {_ANSWER_WITHIN_S:.0f}s after the new leader was elected; "
            f"errors: {dict(Counter(errors))}"
        )
        assert after[-1] == 15
    finally:
        stop.set()
        asker.join(15)
        consumer.close()
        topology_cluster.start_broker(leader)
        topology_cluster.await_in_sync()
        delete_topics(admin, [topic])
