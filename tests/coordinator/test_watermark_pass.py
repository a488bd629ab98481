"""The low-watermark pass's failures (``keyshared/modes/watermark_pass.py``), without servers.

Finding 29 (docs/chaos.md): the pass failed at every try for the rest of a CI run, and nothing
said so; its failures were debug lines. One failed pass stays a debug line (a broker restarting
fails a few); failures that last are a warning, and a pass that succeeds ends the run of them.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from coordinator.layout import GroupLayout
from keyshared.kafka.commits import OFFSET_REFRESH_S
from keyshared.modes import watermark_pass
from keyshared.modes.watermark_pass import FAILING_WARN_S, LowWatermarkPass


class _Watch:
    """Kafka's offsets fail to be read while ``failing``; then there is nothing to commit."""

    def __init__(self) -> None:
        self.failing = True
        self.described: dict[str, Any] = {}

    def reconciled(self, kafka_offsets: Any) -> tuple[dict[Any, int], dict[str, Any]]:
        if self.failing:
            raise RuntimeError("Failed to get committed offsets: Local: Timed out")
        return {}, {}

    def split(self, cursors: Any, records: Any) -> tuple[list[Any], list[Any]]:
        return [], []


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_failures_that_last_are_a_warning_until_a_pass_succeeds(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = _Clock()
    monkeypatch.setattr(watermark_pass.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(watermark_pass, "read_cursors", lambda client, layout: [])
    watch = _Watch()
    pass_ = LowWatermarkPass(watch, None, GroupLayout("g"), {"group.id": "g"})  # type: ignore[arg-type]
    caplog.set_level(logging.DEBUG, logger=watermark_pass.__name__)

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    for _ in range(5):  # a broker restarting: a few failures in a row, no warning
        assert pass_.run() is False
        clock.now += FAILING_WARN_S / 10
    assert warnings() == []
    clock.now += FAILING_WARN_S
    assert pass_.run() is False
    assert len(warnings()) == 1
    assert "has failed for 45s" in warnings()[0] and "Timed out" in warnings()[0]
    clock.now += 1
    assert pass_.run() is False
    assert len(warnings()) == 1, "once per FAILING_WARN_S, not once per pass"

    watch.failing = False
    assert pass_.run() is False  # nothing to commit, but the pass went through
    watch.failing = True
    clock.now += FAILING_WARN_S * 2
    assert pass_.run() is False
    assert len(warnings()) == 1, "a new run of failures starts from its own first failure"


class _Records:
    """The topic records: every commit is named (nothing else to check here)."""

    def commit(self, topic: str, topic_id: str, offsets: Any, held: Any) -> bool:
        return True

    def settle(self, *args: Any) -> None:
        pass


class _Quiet:
    """A group whose only partition stays at offset 10, which Kafka keeps holding."""

    described = {"t": ("id", 1)}

    def reconciled(self, kafka_offsets: Any) -> tuple[dict[Any, int], dict[str, Any]]:
        return {("t", 0): 10}, {}

    def split(self, cursors: Any, records: Any) -> tuple[list[Any], list[Any]]:
        return [], []


def _quiet_pass(monkeypatch: pytest.MonkeyPatch) -> tuple[_Clock, LowWatermarkPass]:
    """A pass over :class:`_Quiet` on a clock of the test's, its ZooKeeper reads stubbed: the
    low watermark stays at 10, every commit is named."""
    clock = _Clock()
    monkeypatch.setattr(watermark_pass.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(watermark_pass, "read_cursors", lambda client, layout: [])
    monkeypatch.setattr(watermark_pass, "_delete", lambda client, layout, stale: None)
    monkeypatch.setattr(watermark_pass, "delete_superseded", lambda client, layout, valid: None)
    monkeypatch.setattr(
        watermark_pass, "low_watermarks", lambda valid: [TopicPartition("t", 0, 10)]
    )
    pass_ = LowWatermarkPass(_Quiet(), None, GroupLayout("g"), {"group.id": "g"})  # type: ignore[arg-type]
    pass_._records = _Records()  # type: ignore[assignment]
    return clock, pass_


def test_an_unchanged_offset_is_committed_again_well_within_kafkas_retention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Members only assign(), so Kafka expires the group's offsets ``offsets.retention.minutes``
    after their last commit even while it runs: a quiet partition's must be sent again."""
    clock, pass_ = _quiet_pass(monkeypatch)
    sent: list[list[tuple[str, int, int]]] = []
    monkeypatch.setattr(pass_, "_within_logs", lambda offsets: offsets)
    monkeypatch.setattr(
        pass_,
        "_commit",
        lambda offsets: sent.append([(o.topic, o.partition, o.offset) for o in offsets]),
    )

    assert pass_.run()
    assert sent == [[("t", 0, 10)]], "a new leader's first pass refreshes what Kafka holds"
    clock.now += watermark_pass.EVERY_S
    assert pass_.run()
    assert len(sent) == 1, "unchanged and recent: not sent again"
    clock.now += OFFSET_REFRESH_S
    assert pass_.run()
    assert sent[1:] == [[("t", 0, 10)]], "unchanged, but as old as the refresh period"
    clock.now += watermark_pass.EVERY_S
    assert pass_.run()
    assert len(sent) == 2


def test_a_pass_whose_commit_failed_waits_before_naming_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each commit is named in the topic's record before it is sent, and the record keeps a
    naming for ``SETTLE_AFTER_S``: passes retried at every tick while Kafka refuses commits
    would name one a second. A pass that merely found nothing to do is due again at once."""
    clock, pass_ = _quiet_pass(monkeypatch)
    monkeypatch.setattr(pass_, "_within_logs", lambda offsets: offsets)

    def refused(offsets: list[TopicPartition]) -> None:
        raise RuntimeError("Commit failed: Broker: Coordinator not available")

    monkeypatch.setattr(pass_, "_commit", refused)
    pass_._periodic()
    assert pass_._next == clock.now + watermark_pass.EVERY_S
    monkeypatch.setattr(pass_, "_commit", lambda offsets: None)
    clock.now = pass_._next
    pass_._periodic()
    assert pass_._next == clock.now + watermark_pass.EVERY_S  # committed: the usual period
    monkeypatch.setattr(watermark_pass, "low_watermarks", lambda valid: [])
    pass_._periodic()
    assert pass_._next == clock.now  # nothing named: due again at once
