"""A replay writes every key back once, in source order, even when every task fails once.

The DLQ here is synthetic (written with the live consumer's header builder) so the test can
size it; the failures come from the test hook in ``keyshared.spark.faults``, which fails each
task's first attempt at a chosen point: with its transaction open (the retry must fence and
abort it) or right after its commit (the retry must find the commit and write nothing).
"""

from __future__ import annotations

from typing import Any

import pytest

from keyshared.dev.topics import TopicFactory
from keyshared.spark import plan_replay, read_dlq, replay
from tests.spark.support import DlqHeader, by_key, header, read_all, write_dlq

KEYS, PER_KEY, PARTITIONS = 30, 8, 3


def _dead_letters(source: str) -> list[tuple[int, int, bytes | None, bytes]]:
    """Each key's records in one source partition, offsets interleaved across keys."""
    out = []
    for seq in range(PER_KEY):
        for k in range(KEYS):
            out.append((k % PARTITIONS, 1000 + seq * KEYS + k, b"key-%d" % k, b"%d" % seq))
    return out


@pytest.mark.parametrize("point", ["replay:mid", "replay:after_commit"])
def test_a_task_failure_neither_duplicates_nor_reorders_a_key(
    spark: Any, fault: Any, kafka_bootstrap: str, new_topic: TopicFactory, point: str
) -> None:
    source = new_topic(PARTITIONS, prefix="src")
    dlq = new_topic(2, prefix="dlq")
    write_dlq(kafka_bootstrap, dlq, source, _dead_letters(source), dlq_partitions=2)

    fault(point)
    result = replay(plan_replay(read_dlq(spark, kafka_bootstrap, dlq)), kafka_bootstrap,
                    partitions=3)  # fmt: skip
    fault("")

    rows = result.rows.collect()
    assert result.written == KEYS * PER_KEY
    assert {row["attempt"] for row in rows} == {1}, "every task's first attempt failed"
    expected = "committed_earlier" if point == "replay:after_commit" else "replayed"
    assert {row["outcome"] for row in rows} == {expected}

    written = read_all(kafka_bootstrap, source, PARTITIONS)
    assert len(written) == KEYS * PER_KEY, "each dead letter written exactly once"
    values = by_key(written)
    for k in range(KEYS):
        assert values[b"key-%d" % k] == [b"%d" % seq for seq in range(PER_KEY)], k
    for msg in written:
        k = int(msg.key().split(b"-")[1])
        assert msg.partition() == k % PARTITIONS, "written to its source partition"
        assert header(msg, DlqHeader.SOURCE_OFFSET) is None, "provenance stripped"
        assert header(msg, "keyshared.replay.run") == result.run_id.encode()
        assert header(msg, "trace") is not None, "the user's own headers are kept"
