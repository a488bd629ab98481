"""Side records: where an exactly-once commit keeps the finished set that its metadata cannot.

Why: a commit names the finished records above its cursor in the offset metadata, and Kafka
caps that at ``offset.metadata.max.bytes`` (4,096). Behind a blocked or stuck key the finished
set outgrows it; what the metadata cannot name must not be committed with its outputs (the next
owner would run the record again and commit them twice), so those outputs used to wait for the
stuck key. A transaction can carry any record the member writes, though: the committer writes
the *whole* finished set (runs: a few bytes for 200,000 offsets behind one stuck record) as one
record of a compacted side topic in the same transaction as the offsets, and the metadata links
it by its offset (:func:`~keyshared.core.offsets.encode_linked`). Commit and side record are
then visible together or not at all, so every finished record's outputs go out with the next
transaction, whatever the metadata's room.

The next owner (and a redo) reads the linked record, and only it: one seek to the linked offset
with ``isolation.level=read_committed``. An aborted transaction's side record is never linked by
a committed offset; a later commit that fits its metadata again (or an operator's reset) commits
no link, and the old record is then simply not read.

The topic is ``keyshared.finished.<group>``: one partition, ``cleanup.policy=compact``, one key
per source partition, created on the first overflow. Compaction never removes the linked record:
it keeps the latest *committed* record of each key (the log cleaner drops aborted transactional
records before they can supersede anything), and a later committed record of the key is linked
by the later commit. Its segments roll hourly (or at 16 MiB) so the cleaner gets to them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from keyshared.core.offsets import decode_finished, encode_linked, linked_record
from keyshared.core.types import TP
from keyshared.kafka.client_config import client_properties
from keyshared.kafka.keystate.errors import KeyStateError
from keyshared.kafka.keystate.topic import ensure_topic, group_topic

__all__ = ["FinishedSets", "topic_for"]

log = logging.getLogger(__name__)

_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": str(3_600_000),
    "segment.bytes": str(16 << 20),
}
_RETRY_S = 5.0  # a topic that could not be had is asked for again after this long
# A side record the broker refused for what it is (no Write ACL, too large, a policy) is refused
# again by the next transaction: each try costs an aborted transaction and a redo, so the topic
# counts as unavailable this long (an operator's fix is picked up without a restart).
_REFUSED_RETRY_S = 300.0
_ADMIN_TIMEOUT_S = 10.0


# What the broker or the client refuses a side record for, again at every try: the record itself
# (too large), the member's rights, the topic's policy.
_REFUSED_FOR_GOOD = frozenset(
    (
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.POLICY_VIOLATION,
    )
)
# The topic is gone (deleted since it was made): make it again, after the usual pause.
_TOPIC_GONE = frozenset((KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC))
# A side record purged unsent: its transaction failed for a reason librdkafka reports only to
# the transaction (no Write ACL fails AddPartitionsToTxn, which makes the transaction abortable
# and purges what is queued). One such failure may be anything; this many in a row, with no
# side record written between them, is taken as a refusal.
_PURGED = frozenset((KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT))
_PURGES_BEFORE_REFUSAL = 3


def topic_for(group: str) -> str:
    """The side topic of ``group``."""
    return group_topic("keyshared.finished", group)


def record_key(tp: TP) -> bytes:
    """One compacted key per source partition."""
    return json.dumps([tp[0], tp[1]], separators=(",", ":")).encode()


class FinishedSets:
    """The side topic of one exactly-once consumer: written by its committer inside each
    transaction whose finished set overflows, read when its partitions are assigned or redone.

    Poll thread only, like the committer that owns it.

    :param kafka_config: the consumer's config; only client-level properties are inherited.
    :param group: the consumer group.
    """

    def __init__(self, kafka_config: Mapping[str, Any], group: str) -> None:
        self.topic = topic_for(group)
        self._group = group
        self._client = client_properties(kafka_config)
        self._admin: AdminClient | None = None
        self._ready = False
        self._failed_at = -_RETRY_S
        self._refused_until = 0.0  # monotonic: side records refused for good until then
        self._purges = 0  # side records purged unsent in a row
        self.written = 0  # side records committed (tests, logs)

    def ready(self) -> bool:
        """Whether the topic exists (created on first use); a failure is logged and asked
        again only after ``_RETRY_S``, so a commit interval does not wait on it each time.

        Caller: the committer, before a transaction that needs a side record.
        Affects: nothing but the topic's existence."""
        now = time.monotonic()
        if now < self._refused_until:
            return False
        if self._ready:
            return True
        if now - self._failed_at < _RETRY_S:
            return False
        try:
            if self._admin is None:
                self._admin = AdminClient(self._client)
            ensure_topic(
                self._admin,
                self.topic,
                self._group,
                _ADMIN_TIMEOUT_S,
                create=True,
                config=_TOPIC_CONFIG,
                what="finished-set",
            )
        except KeyStateError as exc:
            self._failed_at = now
            log.error(
                "the finished-set topic %r cannot be had (%s): commits whose finished set "
                "does not fit the offset metadata name only part of it",
                self.topic,
                exc,
            )
            return False
        self._ready = True
        return True

    def link(
        self, producer: Any, offsets: list[TopicPartition], max_bytes: int, timeout: float
    ) -> list[TopicPartition]:
        """Inside an open transaction: write a side record for each commit whose metadata is
        longer than ``max_bytes`` (the committer gave it the whole finished set), and return
        the commits with that metadata replaced by a link to the record.

        Caller: the committer, after the outputs and before ``send_offsets_to_transaction``.
        Affects: the open transaction (one record per overflowing partition; a flush, so that
        their offsets are known).

        :raises KafkaException: a side record was not written; the transaction must abort.
            When the broker refused it for what it is (not for its own state), :meth:`ready`
            says no for ``_REFUSED_RETRY_S``: the committer's fallback then names less
            instead of aborting every transaction.
        """
        long = [tp for tp in offsets if len(tp.metadata or "") > max_bytes]
        if not long:
            return offsets
        written: dict[TP, int] = {}
        errors: list[KafkaError] = []

        def delivered(tp: TP, err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                written[tp] = msg.offset()

        try:
            for tp in long:
                key = (tp.topic, tp.partition)
                producer.produce(
                    self.topic,
                    value=str(tp.metadata).encode("ascii"),
                    key=record_key(key),
                    partition=0,
                    on_delivery=lambda err, msg, key=key: delivered(key, err, msg),
                )
            producer.flush(timeout)
        except KafkaException as exc:  # refused before it left (too large, unknown topic)
            if exc.args and isinstance(exc.args[0], KafkaError):
                self._refused(exc.args[0])
            raise
        if errors or len(written) < len(long):
            err = errors[0] if errors else KafkaError(KafkaError._TIMED_OUT)
            self._refused(err)
            raise KafkaException(err)
        self._purges = 0
        linked: list[TopicPartition] = []
        for tp in offsets:
            key = (tp.topic, tp.partition)
            if key not in written:
                linked.append(tp)
                continue
            whole = decode_finished(tp.offset, tp.metadata)
            text = encode_linked(tp.offset, whole, written[key], max_bytes).text
            linked.append(TopicPartition(tp.topic, tp.partition, tp.offset, metadata=text))
        self.written += len(written)
        return linked

    def _refused(self, err: KafkaError) -> None:
        """Decide what a side record's failure says about the topic: refused for good (turned
        off for ``_REFUSED_RETRY_S``), gone (made again after ``_RETRY_S``), or nothing (the
        transaction's normal abort and redo)."""
        now = time.monotonic()
        code = err.code()
        if code in _TOPIC_GONE:
            self._ready = False
            self._failed_at = now
            log.error("the finished-set topic %r is gone (%s): making it again", self.topic, err)
            return
        if code in _PURGED:
            self._purges += 1
            if self._purges < _PURGES_BEFORE_REFUSAL:
                return
        elif code not in _REFUSED_FOR_GOOD:
            return
        self._purges = 0
        self._refused_until = now + _REFUSED_RETRY_S
        self._ready = False
        log.error(
            "the broker refused side records of %r (%s%s): for the next %.0f s, commits whose "
            "finished set does not fit the offset metadata name only what fits, and the other "
            "outputs wait (grant this member Write on the topic, or check its limits)",
            self.topic,
            err,
            f", {_PURGES_BEFORE_REFUSAL} transactions in a row" if code in _PURGED else "",
            _REFUSED_RETRY_S,
        )

    def expand(
        self, starts: dict[TP, tuple[int | None, str]], timeout: float
    ) -> dict[TP, tuple[int | None, str]]:
        """The committed starting points with each linked metadata replaced by the whole
        finished set its side record holds.

        Caller: the committer's ``starting_points`` (assignment, redo).
        Affects: nothing; reads the side topic with ``read_committed``.

        A linked record that is gone (it cannot be, short of someone deleting the topic) is
        logged at error and the metadata's own part is used: the records only the side record
        named run again, and their outputs appear twice.

        :raises KafkaException: the side topic did not answer within ``timeout`` (like the
            committed offsets not answering: the caller retries).
        """
        links = {
            tp: link
            for tp, (offset, metadata) in starts.items()
            if offset is not None and (link := linked_record(metadata)) is not None
        }
        if not links:
            return starts
        expanded = dict(starts)
        found = self._read(links, timeout)
        for tp, link in links.items():
            offset = starts[tp][0]
            if tp in found:
                expanded[tp] = (offset, found[tp])
            else:
                log.error(
                    "%s[%d]: the finished set that the commit at %s links (%r offset %d) is "
                    "gone; only the part the metadata names is skipped, the rest runs again",
                    *tp,
                    offset,
                    self.topic,
                    link,
                )
        return expanded

    def _read(self, links: dict[TP, int], timeout: float) -> dict[TP, str]:
        deadline = time.monotonic() + timeout
        consumer = Consumer({
            **self._client,
            "group.id": f"{self.topic}.reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            # A link below the log's start is an error to report, not a jump to its end.
            "auto.offset.reset": "error",
        })  # fmt: skip
        found: dict[TP, str] = {}
        try:
            for tp, link in sorted(links.items(), key=lambda item: item[1]):
                consumer.assign([TopicPartition(self.topic, 0, link)])
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
                    msg = consumer.poll(min(remaining, 1.0))
                    if msg is None:
                        continue
                    err = msg.error()
                    if err is not None:
                        # Nothing readable at the link yet means its transaction's marker has
                        # not reached this partition (the offsets may be stable first): wait.
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        if err.fatal() or not err.retriable():
                            raise KafkaException(err)
                        continue
                    value = msg.value()
                    if msg.offset() == link and msg.key() == record_key(tp) and value:
                        found[tp] = value.decode("ascii")
                    break
        finally:
            consumer.close()
        return found
