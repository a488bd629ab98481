"""The whole story on the real broker: the live consumer parks a key, the DLQ is replayed with
Spark, and the key's records come back to their source partition in their original order.

1. ``KeySharedConsumer(poison="park")`` fails a key's poison record: it and the key's later
   records go to the DLQ, other keys are processed.
2. ``keyshared dlq replay`` refuses while the key is parked, and names the way out.
3. ``--release`` releases it and replays; the consumer, restarted with the bug fixed, handles
   the key's tail once, in order; the source topic holds each original record once, plus the
   tail once more at its end, and nothing of any other key.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from keyshared import Record, RetryPolicy
from keyshared.cli import cli
from keyshared.dev.topics import GroupFactory, TopicFactory
from keyshared.spark.report import REPORT_COLUMNS
from tests.kafka.support.inprocess import Running, consumers_for
from tests.spark.support import WAIT, DlqHeader, by_key, header, read_all

BAD = b"bad"
POISON = b"poison"


class Handler:
    """Fails ``poison`` until ``fixed``; records every value handled, per key."""

    def __init__(self) -> None:
        self.fixed = False
        self.done: dict[bytes, list[bytes]] = {}
        self.count = 0
        self._cond = threading.Condition()

    def __call__(self, record: Record) -> None:
        if record.value == POISON and not self.fixed:
            raise ValueError("cannot handle this payment")
        with self._cond:
            self.done.setdefault(record.key, []).append(record.value)
            self.count += 1
            self._cond.notify_all()

    def wait_for(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.count >= count, WAIT), self.count


@pytest.fixture
def start(kafka_bootstrap: str) -> Iterator[Callable[..., Running]]:
    yield from consumers_for(kafka_bootstrap, WAIT, RetryPolicy(max_attempts=2,
                                                                initial_backoff=0.01))  # fmt: skip


def test_a_parked_key_is_replayed_in_order_once_released(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory, new_group: GroupFactory,
    start: Callable[..., Running], tmp_path: Any,
) -> None:  # fmt: skip
    topic = new_topic(2, prefix="orders")
    dlq = new_topic(2, prefix="orders-dlq")
    group = new_group("parking")
    bad_values = [b"1", POISON, b"3", b"4"]
    records = [(b"k-%d" % i, b"%d" % i) for i in range(12)]
    records[3:3] = [(BAD, bad_values[0]), (BAD, bad_values[1])]
    records[9:9] = [(BAD, bad_values[2]), (BAD, bad_values[3])]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0 if key == BAD else 1)
    assert producer.flush(WAIT) == 0

    handler = Handler()
    run = start(group, topic, handler, poison="park", dlq_topic=dlq)
    handler.wait_for(len(records) - 3)  # everything but the bad key's tail
    parked_before = read_all(kafka_bootstrap, dlq, 2)
    while len(parked_before) < 3:  # the tail's dead letters are acknowledged before commit
        parked_before = read_all(kafka_bootstrap, dlq, 2)
    run.stop()
    assert [m.value() for m in parked_before] == bad_values[1:]
    original = read_all(kafka_bootstrap, topic, 2)

    runner = CliRunner()
    args = ["dlq", "replay", "-b", kafka_bootstrap, "-d", dlq, "--no-progress",
            "--master", "local[2,4]"]  # fmt: skip
    refused = runner.invoke(cli, args)
    assert refused.exit_code == 1, refused.output
    said = " ".join(refused.output.split())
    assert "1 key(s) to replay are still parked: bad of" in said and "--release" in said
    assert len(read_all(kafka_bootstrap, topic, 2)) == len(original), "nothing written"

    report = tmp_path / "plan.csv"
    done = runner.invoke(cli, [*args, "--release", "--report", str(report)])
    assert done.exit_code == 0, done.output
    assert "Released 1 parked key(s)" in done.output
    assert "Replayed 3 records" in done.output
    assert report.is_dir() and any(report.glob("*.csv")), "Spark writes CSV as a folder"
    assert (next(report.glob("*.csv")).read_text().splitlines()[0].split(",")
            == list(REPORT_COLUMNS))  # fmt: skip

    after = read_all(kafka_bootstrap, topic, 2)
    added = [m for m in after if header(m, "keyshared.replay.run")]
    end_of_originals = max(m.offset() for m in original if m.partition() == 0)
    assert all(m.offset() > end_of_originals for m in added), "appended after the originals"
    assert [m.value() for m in added] == bad_values[1:], "the tail, once, in order"
    assert all(m.key() == BAD and m.partition() == 0 for m in added)
    assert all(header(m, DlqHeader.REASON) is None for m in added), "provenance stripped"
    assert len(after) == len(original) + 3, "nothing else was written"
    originals = by_key([m for m in after if not header(m, "keyshared.replay.run")])
    assert originals == by_key(original), "every original record untouched"

    handler.fixed = True
    run = start(group, topic, handler, poison="park", dlq_topic=dlq)
    handler.wait_for(len(records))
    run.stop()
    assert handler.done[BAD] == bad_values, "the released key resumed in its original order"
    assert all(len(v) == 1 for k, v in handler.done.items() if k != BAD), "others untouched"
