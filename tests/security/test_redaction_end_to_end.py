"""A redaction hook keeps sensitive payload fields out of logs and DLQ headers (issue 14).

A real consumer on the session's broker: a record whose key and value carry a card number
fails; the handler's error quotes the value. With ``redact=``, no log line and no keyshared
header of the dead letter contains the number, while the dead letter's key and value are the
record byte for byte (a replay needs them).
"""

from __future__ import annotations

import logging
import re
import threading

import pytest

import keyshared
from keyshared.kafka.dlq import DlqHeader
from tests.kafka.support.inprocess import running
from tests.kafka.support.journal import wait_committed_to_end, wait_for
from tests.kafka.test_consumer_bad_input import _read_all

CARD = "4111111111111111"


def mask_cards(text: str) -> str:
    return re.sub(r"\d{13,19}", "<card>", text)


def test_redact_hook_keeps_card_numbers_out_of_logs_and_dlq_headers(
    kafka_bootstrap: str, new_topic, new_group, caplog: pytest.LogCaptureFixture
) -> None:
    from confluent_kafka import Producer

    topic, dlq, group = new_topic(partitions=1), new_topic(partitions=1, prefix="dlq"), new_group()
    key, value = f"customer-{CARD}".encode(), f'{{"card": "{CARD}"}}'.encode()
    slow_key = f"slow-{CARD}".encode()
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, key=slow_key, value=b"{}")
    producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    release = threading.Event()

    def work(record: keyshared.Record) -> None:
        if record.key == slow_key:
            release.wait(60)  # reported stuck: its key is logged, redacted
            return
        raise ValueError(f"declined: {record.value.decode()}")

    caplog.set_level(logging.DEBUG, logger="keyshared")
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group},
        [topic],
        work,
        poison="dead_letter",
        dlq_topic=dlq,
        retry=keyshared.RetryPolicy(max_attempts=2, initial_backoff=0.01),
        stuck_after=0.5,
        redact=mask_cards,
    )
    try:
        with running(consumer):
            letters = _read_all(kafka_bootstrap, dlq, 1)
            wait_for(lambda: any("stuck record" in r.getMessage() for r in caplog.records), 15,
                     "the stuck-record warning")  # fmt: skip
            release.set()
            wait_committed_to_end(kafka_bootstrap, group, topic)
    finally:
        release.set()
    messages = [r.getMessage() for r in caplog.records]
    assert any("retrying" in m for m in messages) and any("dead-lettering" in m for m in messages)
    leaked = [m for m in messages if CARD in m]
    assert not leaked, leaked
    assert any("key=b'slow-<card>'" in m for m in messages)
    assert len(letters) == 1
    letter = letters[0]
    assert letter.key() == key and letter.value() == value, "the record itself is unchanged"
    headers = dict(letter.headers())
    assert headers[DlqHeader.ERROR_MESSAGE] == b'declined: {"card": "<card>"}'
    assert CARD.encode() not in headers[DlqHeader.TRACEBACK]
    assert b"<card>" in headers[DlqHeader.TRACEBACK]
