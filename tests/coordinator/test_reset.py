"""Offset resets of a stopped group take effect in every mode (issue 24, defect 2).

- Kafka's own tool (``kafka-consumer-groups --reset-offsets``, here the same AdminClient call
  it makes) on a stopped ``key_shared`` group: its cursors in ZooKeeper used to win, and the
  leader's low-watermark commit wrote the old offsets back.
- ``keyshared reset``: Kafka offsets, ZooKeeper cursors and finished-offset metadata at once;
  refused while a member is live.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from keyshared.cli import cli
from tests.coordinator.conftest import NAMESPACE, WAIT_S
from tests.coordinator.members import StartMember
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder, StartConsumer, consumers_for
from tests.kafka.support.journal import committed, high_watermarks, produce


@pytest.fixture
def start_plain(kafka_bootstrap: str, new_topic: object) -> Iterator[StartConsumer]:
    """Consumers stopped after the test, before ``new_topic`` deletes their topics."""
    yield from consumers_for(kafka_bootstrap)


def _records(keys: int, each: int, first: int = 1) -> list[tuple[bytes | None, int]]:
    return [(f"k{k}".encode(), seq) for seq in range(first, first + each) for k in range(keys)]


def _settle(journal: Recorder, expected: int, quiet: float = 3.0) -> int:
    """Wait for ``expected`` records, then ``quiet`` seconds more for any extra one."""
    deadline = time.monotonic() + WAIT_S * 2
    while journal.finished() < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(quiet)
    return journal.finished()


def _process_all(start: StartMember, group: str, topic: str, bootstrap: str, total: int) -> None:
    """Run one member until every record is handled and the group's offsets reach the end."""
    journal = Recorder(pid=1)
    run = start(group, topic, journal, member="A")
    wait_until(lambda: journal.finished() >= total, "the first pass", WAIT_S * 2)
    run.stop()
    ends = high_watermarks(bootstrap, topic)
    assert {p: o for p, (o, _) in committed(bootstrap, group, topic).items()} == ends


def _reset(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["reset", "--namespace", NAMESPACE, *args])
    return result.exit_code, result.output


def test_kafka_tool_reset_of_a_stopped_key_shared_group_takes_effect(
    start: StartMember, new_topic: object, new_group: object, kafka_bootstrap: str
) -> None:
    topic = new_topic(2)  # type: ignore[operator]
    group = new_group("ks-kafka-reset")  # type: ignore[operator]
    produce(kafka_bootstrap, topic, _records(20, 10))
    _process_all(start, group, topic, kafka_bootstrap, 200)

    # What kafka-consumer-groups --reset-offsets --to-earliest --execute does.
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, 0) for p in (0, 1)])
    admin.alter_consumer_group_offsets([request])[group].result(timeout=WAIT_S)

    again = Recorder(pid=2)
    start(group, topic, again, member="A", session_timeout=6.0)
    handled = _settle(again, 200)
    assert handled == 200, f"{handled} of 200 records handled again after the reset"


def test_keyshared_reset_rewinds_and_skips_a_stopped_key_shared_group(
    start: StartMember,
    new_topic: object,
    new_group: object,
    kafka_bootstrap: str,
    zookeeper_hosts: str,
) -> None:
    topic = new_topic(2)  # type: ignore[operator]
    group = new_group("ks-reset")  # type: ignore[operator]
    produce(kafka_bootstrap, topic, _records(20, 10))
    _process_all(start, group, topic, kafka_bootstrap, 200)
    base = ["-b", kafka_bootstrap, "-g", group, "-t", topic, "--zookeeper", zookeeper_hosts]

    code, out = _reset(*base, "--to-earliest", "--dry-run")
    assert code == 0, out
    assert "dry run" in out.lower()
    ends = high_watermarks(kafka_bootstrap, topic)
    assert {p: o for p, (o, _) in committed(kafka_bootstrap, group, topic).items()} == ends

    code, out = _reset(*base, "--to-earliest")
    assert code == 0, out
    replay = Recorder(pid=2)
    run = start(group, topic, replay, member="A")
    assert _settle(replay, 200) == 200, "the rewind did not replay every record"

    code, out = _reset(*base, "--to-latest")
    assert code == 1 and "live" in out and "A" in out, out  # refused while A runs
    run.stop()

    produce(kafka_bootstrap, topic, _records(20, 5, first=11))  # the flood to skip
    code, out = _reset(*base, "--to-latest")
    assert code == 0, out
    skip = Recorder(pid=3)
    start(group, topic, skip, member="A")
    time.sleep(3)
    produce(kafka_bootstrap, topic, _records(20, 1, first=16))
    assert _settle(skip, 20) == 20, "the skipped flood was processed, or the new records not"


def test_keyshared_reset_to_a_datetime_in_partition_mode(
    start_plain: StartConsumer, new_topic: object, new_group: object, kafka_bootstrap: str
) -> None:
    topic = new_topic(2)  # type: ignore[operator]
    group = new_group("pm-reset")  # type: ignore[operator]
    produce(kafka_bootstrap, topic, _records(20, 5))
    time.sleep(1.5)
    middle = datetime.now(UTC)
    time.sleep(1.5)
    produce(kafka_bootstrap, topic, _records(20, 5, first=6))
    first = Recorder(pid=1)
    run = start_plain(group, topic, first)
    wait_until(lambda: first.finished() >= 200, "the first pass", WAIT_S * 2)
    run.stop()

    base = ["-b", kafka_bootstrap, "-g", group, "-t", topic]
    code, out = _reset(*base, "--to-datetime", middle.isoformat())
    assert code == 0, out
    for _, (offset, metadata) in committed(kafka_bootstrap, group, topic).items():
        assert not metadata, f"finished-offset metadata kept after the reset: {metadata!r}"
        assert offset > 0
    again = Recorder(pid=2)
    run = start_plain(group, topic, again)
    assert _settle(again, 100) == 100, "not exactly the records after the datetime"
    run.stop()  # before the topic goes: a final commit to a deleted topic is retried for 30 s
    assert {e.seq for e in again.snapshot()} == set(range(6, 11))


def test_keyshared_reset_usage_errors(kafka_bootstrap: str, new_topic: object) -> None:
    topic = new_topic(1)  # type: ignore[operator]
    base = ["-b", kafka_bootstrap, "-g", "g", "-t", topic]
    code, out = _reset(*base)
    assert code == 2 and "exactly one of" in out
    code, out = _reset(*base, "--to-earliest", "--to-latest")
    assert code == 2 and "exactly one of" in out
    code, out = _reset(*base, "--to-offset", "zero")
    assert code == 2 and "P:O" in out
    code, out = _reset(*base, "--to-offset", "7:0")
    assert code == 1 and "no partition 7" in out
    code, out = _reset("-b", kafka_bootstrap, "-g", "g", "-t", "no-such-topic", "--to-earliest")
    assert code == 1 and "no-such-topic" in out
