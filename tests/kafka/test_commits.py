"""The committer without a broker: what it sends, what it skips, what a refusal leaves behind.

The scripted consumer records every commit call; the windows are driven by hand, so each case
names exactly which cursor and metadata a commit must carry. The real-broker tests
(``test_consumer_offsets``, ``test_rebalance_protocols``) prove the same paths end to end.
"""

from __future__ import annotations

import logging
import random
import uuid

import pytest
from confluent_kafka import KafkaError
from prometheus_client import REGISTRY

from keyshared.core.offsets import decode_finished
from keyshared.core.window import InFlightWindow
from keyshared.kafka import commits
from keyshared.kafka.commits import OFFSET_REFRESH_S, Committer
from keyshared.metrics import ConsumerMetrics
from keyshared.runtime.dispatcher import Dispatcher
from keyshared.runtime.partition import PartitionState
from keyshared.settings import ConsumerOptions
from tests.kafka.support.fake_consumer import FakeConsumer


class Desk:
    """One committer over one partition of a scripted consumer."""

    def __init__(self, max_metadata_bytes: int = 4000) -> None:
        self.fake = FakeConsumer()
        self.metrics = ConsumerMetrics(f"g-{uuid.uuid4().hex[:8]}", "m")
        self.state = PartitionState("t", 0, self.metrics.partition("t", 0), committed=0)
        self.state.window = InFlightWindow(
            start_offset=0, max_window=10_000, per_worker_capacity=10_000
        )
        self.committer = Committer(
            self.fake,
            self.metrics,
            Dispatcher(ConsumerOptions(), 1, lambda _w, _works: None),
            lambda tp: self.state if tp == self.state.tp else None,
            max_metadata_bytes=max_metadata_bytes,
        )
        self.fake.on_commit = self.committer.on_commit
        self.admitted = 0

    def finish(self, *offsets: int) -> None:
        """Admit ``0..max(offsets)`` (distinct keys) and finish the given offsets."""
        window = self.state.window
        assert window is not None
        for offset in range(self.admitted, max(offsets) + 1):
            window.admit(offset, b"k%d" % offset, worker=0, payload=None, now=0.0)
        self.admitted = max(self.admitted, max(offsets) + 1)
        for offset in offsets:
            window.complete(offset)

    def serve_callbacks(self) -> None:
        """What the next ``consume`` does first: deliver the outcome of async commits."""
        self.fake.consume(1, 0)

    def sent(self) -> list[tuple[int, str]]:
        return [(o, m) for call in self.fake.commits for (_, _, o, m) in call.offsets]


def test_periodic_commit_sends_only_what_moved() -> None:
    d = Desk()
    d.finish(0, 1)
    d.committer.commit_async([d.state])
    d.serve_callbacks()
    d.committer.commit_async([d.state])  # nothing moved: nothing sent
    assert d.sent() == [(2, "")]
    assert d.state.committed == 2


def test_finished_records_above_the_cursor_travel_in_the_metadata() -> None:
    d = Desk()
    d.finish(1, 2, 4)  # 0 and 3 still running
    d.committer.commit_async([d.state])
    [(offset, metadata)] = d.sent()
    assert offset == 0
    assert decode_finished(offset, metadata) == {1, 2, 4}


def test_metadata_that_does_not_fit_keeps_what_fits_counts_the_rest_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    d = Desk(max_metadata_bytes=40)
    finished = sorted(random.Random(1).sample(range(1, 3000), 400))
    d.finish(*finished)  # sparse and irregular: cannot all be squeezed into 40 bytes
    with caplog.at_level(logging.WARNING, logger="keyshared.kafka.commits"):
        d.committer.commit_async([d.state])
        d.serve_callbacks()
        d.finish(3001)
        d.committer.commit_sync([d.state])  # sent again, whatever moved
    [(offset, metadata), _] = d.sent()
    kept = decode_finished(offset, metadata)
    assert offset == 0 and 0 < len(kept) < len(finished) and len(metadata) <= 40
    assert set(kept) == set(finished[: len(kept)])  # the runs nearest the cursor
    labels = {"group": d.metrics.group, "member": d.metrics.member}
    overflows = REGISTRY.get_sample_value("keyshared_commit_metadata_overflows_total", labels)
    assert overflows == 2
    left_out = REGISTRY.get_sample_value("keyshared_commit_metadata_left_out_offsets", labels)
    assert left_out == len(finished) + 1 - len(kept)
    warnings = [r for r in caplog.records if "do not fit the commit metadata" in r.message]
    assert len(warnings) == 1, "the overflow must be logged once, not at every commit"


def test_refused_async_commit_is_not_remembered_as_committed_and_is_resent() -> None:
    d = Desk()
    d.fake.refuse_commits = KafkaError.ILLEGAL_GENERATION
    d.finish(0)
    d.committer.commit_async([d.state])
    d.serve_callbacks()
    assert d.state.committed == 0, "a refused commit was taken as done"
    d.fake.refuse_commits = None
    d.committer.commit_async([d.state])  # unchanged cursor, but the last send failed
    d.serve_callbacks()
    assert d.sent() == [(1, ""), (1, "")]
    assert d.state.committed == 1


def test_sync_commit_is_sent_even_when_the_same_cursor_went_out_asynchronously() -> None:
    d = Desk()
    d.finish(0)
    d.committer.commit_async([d.state])  # in flight; may yet fail mid-rebalance
    assert d.committer.commit_sync([d.state])
    assert [c.asynchronous for c in d.fake.commits] == [True, False]


def test_refused_sync_commit_reports_failure() -> None:
    d = Desk()
    d.fake.refuse_commits = KafkaError.ILLEGAL_GENERATION
    d.finish(0)
    assert not d.committer.commit_sync([d.state])
    assert d.state.committed == 0


def test_partition_without_a_window_commits_nothing() -> None:
    d = Desk()
    d.state.window = None  # assigned, no record seen and no committed offset
    assert d.committer.commit_sync([d.state])
    assert d.fake.commits == []


def test_an_unchanged_offset_is_sent_again_well_within_kafkas_retention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kafka expires the offsets of a group it sees without members (``exclusive`` only
    assigns) ``offsets.retention.minutes`` after their last commit, running or not: a partition
    quiet that long would restart from ``auto.offset.reset`` at the next activation."""
    now = [1000.0]
    monkeypatch.setattr(commits.time, "monotonic", lambda: now[0])
    d = Desk()
    d.finish(0, 1)
    d.committer.commit_async([d.state])
    d.serve_callbacks()
    now[0] += OFFSET_REFRESH_S - 1
    d.committer.commit_async([d.state])  # unchanged and recent: skipped
    assert d.sent() == [(2, "")]
    now[0] += 1
    d.committer.commit_async([d.state])  # unchanged, but as old as the refresh period
    d.serve_callbacks()
    assert d.sent() == [(2, ""), (2, "")]
    d.committer.commit_async([d.state])
    assert d.sent() == [(2, ""), (2, "")], "refreshed once, not at every commit"
