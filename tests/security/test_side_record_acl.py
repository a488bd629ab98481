"""A member that may not Write its side topic: commits stop aborting, outputs stay exactly once.

On a broker with an authorizer (``conftest.sasl_broker``), the admin makes the side topic
``keyshared.finished.<group>`` and denies ``alice`` Write on it (she may still describe and
read it). An exactly-once member running as alice blocks one key with ``poison="block"`` under
a lowered metadata budget, so its finished set overflows and every commit wants a side record.
The broker refuses each one; after at most a few aborted transactions the member must stop
asking (for ``_REFUSED_RETRY_S``) and commit what its metadata can name, and a second member
that takes over must repeat no output. What librdkafka reports for the refusal is logged.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from prometheus_client import REGISTRY

from keyshared.dev.kafka import sasl_client_config
from keyshared.dev.topics import create_topic, unique_name
from keyshared.kafka import finished_sets
from keyshared.kafka.commits import Committer
from tests.kafka.support.inprocess import Running
from tests.kafka.support.journal import produce, wait_for
from tests.kafka.test_exactly_once import assert_exactly_once, expected_outputs, read_committed
from tests.kafka.test_exactly_once_overflow import Outputs, blocked_records, member
from tests.security.conftest import ADMIN, ADMIN_PASSWORD, USER, SaslBroker

RECORDS = 10_000
BLOCKED_SHARE = 0.1
METADATA_BYTES = 500  # the finished set above the blocked record takes ~950 bytes

log = logging.getLogger(__name__)


def _member(broker: SaslBroker, group: str, source: str, name: str, handler: Outputs) -> Running:
    return member(broker.bootstrap, group, source, name, handler, client=broker.credentials)


def _commits(group: str, member: str, outcome: str) -> float:
    labels = {"group": group, "member": member, "outcome": outcome}
    return REGISTRY.get_sample_value("keyshared_commits_total", labels) or 0.0


def _lines(caplog: pytest.LogCaptureFixture, *parts: str) -> list[str]:
    """The captured log lines that contain every one of ``parts``."""
    messages = (record.getMessage() for record in caplog.records)
    return [line for line in messages if all(part in line for part in parts)]


def _committed(broker: SaslBroker, group: str, topic: str) -> int:
    consumer = Consumer({**broker.config, "group.id": group})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return int(tp.offset)
    finally:
        consumer.close()


def _deny_side_writes(broker: SaslBroker, group: str) -> Any:
    """Make source, output and side topic as the admin; alice may do all but Write the side
    topic (a DENY wins over the ALLOW)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap,
                         **sasl_client_config(ADMIN, ADMIN_PASSWORD)})  # fmt: skip
    side = finished_sets.topic_for(group)
    create_topic(admin, side, 1, finished_sets._TOPIC_CONFIG)
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            side,
            ResourcePatternType.LITERAL,
            f"User:{USER}",
            "*",
            operation,
            permission,
        )
        for operation, permission in (
            (AclOperation.ALL, AclPermissionType.ALLOW),
            (AclOperation.WRITE, AclPermissionType.DENY),
        )
    ]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)
    return side


def test_a_side_topic_without_write_stops_aborting_and_repeats_no_output(
    sasl_broker: SaslBroker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broker = sasl_broker
    monkeypatch.setattr(Committer.__init__, "__defaults__", (METADATA_BYTES,))
    caplog.set_level(logging.INFO, logger="keyshared")
    source, out = broker.new_topic(), broker.new_topic()
    group = unique_name("acl-side")
    side = _deny_side_writes(broker, group)
    records = blocked_records(RECORDS, BLOCKED_SHARE, seed=41)
    produce(broker.bootstrap, source, records, extra=broker.credentials)

    first = Outputs(out, fail_first_blocked=True)
    run = _member(broker, group, source, "first", first)
    try:
        wait_for(lambda: _lines(caplog, "refused side records"), 60, f"{side!r} taken as refused")
        failed = _commits(group, "first", "failed")
        ok = _commits(group, "first", "ok")
        wait_for(lambda: _commits(group, "first", "ok") > ok, 30, "a commit after the refusal")
        # What the fallback commits named is visible, once; the rest waits for the blocked key.
        early = read_committed(broker.bootstrap, out, 0, timeout=20, extra=broker.credentials)
        failed_since = _commits(group, "first", "failed") - failed  # gone once it stops
    finally:
        run.stop()
    for part in ("TOPIC_AUTHORIZATION_FAILED", "transaction failed (", "refused side"):
        for line in _lines(caplog, part):
            log.warning("observed: %s", line)
    # librdkafka fails AddPartitionsToTxn, makes the transaction abortable and purges the
    # queued side record: its delivery report says _PURGE_QUEUE, not the authorization error.
    assert _lines(caplog, "Failed to add partition(s) to transaction", "TOPIC_AUTHORIZATION_FAILED")
    failures = _lines(caplog, "transaction failed (")
    assert failures and all("_PURGE_QUEUE" in line for line in failures), failures
    assert 1 <= failed <= 3, f"{failed} failed commits before the refusal: {failures}"
    assert failed_since == 0, f"{failed_since} commits failed after the refusal"
    assert all(n == 1 for values in early.values() for n in Counter(values).values()), early

    second = Outputs(out, fail_first_blocked=False)
    run = _member(broker, group, source, "second", second)
    wait_for(lambda: _committed(broker, group, source) == len(records), 60, "commits to the end")
    run.stop()

    seen = read_committed(broker.bootstrap, out, len(records), extra=broker.credentials)
    assert_exactly_once(seen, expected_outputs(records))
