"""A partition's log end, read by a client that neither subscribes to nor is assigned it.

librdkafka keeps a topic's partitions and leaders in a metadata cache, and refreshes it only
for the topics the client works with. A client that neither subscribes to nor is assigned the
topic keeps what it cached when a partition's leader crashes, for good. Measured on the
three-broker topology, with a plain consumer asking a partition's end in a loop while its leader
was SIGKILLed: one run answered "Local: Unknown partition" for the remaining 100 s (a failed
ListOffsets makes librdkafka drop the topic from the cache "in case the topic isn't a known
topic", ``rd_kafka_query_wmark_offsets_resp_cb``, and nothing asks for it again); another
timed out for the 60 s the test waited after the new leader was elected (the cache still named
the dead one). One metadata request for the topic (``list_topics``) and it answered at once.

``key_shared``'s low-watermark pass reads its topics' ends this way; with the cached client it
stopped bringing the group's Kafka offsets up for the rest of a run
(``tests/kafka/test_log_ends.py`` reproduces it; ``docs/chaos.md`` has the history).
:mod:`keyshared.kafka.keystate.topic` meets the same behaviour, worked around there with a new
client.
"""

from __future__ import annotations

from confluent_kafka import KafkaException, TopicPartition

from keyshared.kafka.kafka_consumer import KafkaConsumer

__all__ = ["log_end"]


def log_end(consumer: KafkaConsumer, tp: TopicPartition, timeout: float) -> int:
    """The partition's high watermark, asked of its leader now (not the client's cache).

    When the query fails, the topic's metadata is asked for (which puts the topic back in
    the client's cache, with its current leader) and the query is made once more. Both
    failures were seen after a leader's crash: "Unknown partition" (the topic dropped from the
    cache), and timeouts that never ended (the cache still naming the dead leader).

    :raises KafkaException: the second query's error, as ``get_watermark_offsets`` raises it
        (``_TIMED_OUT`` when no broker answered within ``timeout``).
    """
    try:
        return consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)[1]
    except KafkaException:
        pass  # perhaps answered from a stale cache: the query is made again once refreshed
    consumer.list_topics(tp.topic, timeout=timeout)
    return consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)[1]
