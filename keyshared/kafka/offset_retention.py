"""How often an unchanged commit is sent again, so that Kafka keeps it while the group runs.

A group whose members only ``assign()`` (``key_shared``, and ``exclusive`` with a
coordinator) has no members in Kafka's eyes, and Kafka expires each of its committed offsets
``offsets.retention.minutes`` after that offset's last commit, even while the group runs
(KIP-211 spares only groups with members). A quiet partition's offset then goes, and in
``exclusive`` mode those offsets are the group's progress: the next active member would find
none and start where ``auto.offset.reset`` says (the whole partition again, or past
unprocessed records). So the exclusive member's committer sends unchanged offsets again well
within the retention: every quarter of it, and at least hourly
(:data:`~keyshared.kafka.commits.OFFSET_REFRESH_S`). The retention is the brokers' setting
(Kafka's default is 7 days; some clusters keep a day or less, test clusters a minute), read
once in the background when the member joins; until it is read, or if it cannot be (no
``DescribeConfigs`` on the cluster), the hourly refresh applies.

``key_shared`` keeps its progress in its range cursors, and its leader's low-watermark pass
brings Kafka's offsets up to them (:mod:`keyshared.modes.watermark_pass`): they are refreshed
the same way, so that lag tools keep seeing the group and a leader that joins later does not
find a running group's offset gone (it could not tell that from an operator's reset).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    ResourceType,
)

from keyshared.kafka.client_config import client_properties
from keyshared.kafka.commits import OFFSET_REFRESH_S

__all__ = ["OffsetRetention", "RefusedError", "read_retention_minutes", "refresh_interval"]

log = logging.getLogger(__name__)

RETENTION_KEY = "offsets.retention.minutes"
_READ_TIMEOUT = 10.0  # seconds for one read of the brokers' setting
_RETRY_FIRST = 5.0  # seconds before the first retry of a read that got no answer
_RETRY_MAX = 300.0


def refresh_interval(retention_minutes: float | None) -> float:
    """Seconds between commits of an unchanged offset: a quarter of the retention, at most
    :data:`OFFSET_REFRESH_S` (None: the retention is unknown)."""
    if retention_minutes is None or retention_minutes <= 0:
        return OFFSET_REFRESH_S
    return min(OFFSET_REFRESH_S, retention_minutes * 60.0 / 4)


class OffsetRetention:
    """The brokers' offset retention, read once on a thread of its own.

    Caller: the exclusive member builds one at join for its committer (which reads
    :attr:`refresh_every` on every commit, poll thread); the low-watermark pass builds one
    when its first pass is due (read on the pass's thread).
    Affects: nothing but its own reading; :attr:`refresh_every` is one float, replaced once
    (an attribute write, atomic for the readers on other threads).
    """

    def __init__(self, kafka_config: Mapping[str, Any]) -> None:
        self._config = {**client_properties(kafka_config), "log_level": 3}
        self.refresh_every = OFFSET_REFRESH_S
        self.retention_minutes: float | None = None

    def start(self) -> OffsetRetention:
        threading.Thread(target=self._read, name="keyshared-offset-retention", daemon=True).start()
        return self

    def _read(self) -> None:
        """Until it is read: a broker restarting at join must not leave a short retention
        refreshed hourly for the member's life. Only a refusal (no ``DescribeConfigs`` on the
        cluster) ends the tries."""
        pause = _RETRY_FIRST
        while True:
            try:
                minutes = read_retention_minutes(self._config, _READ_TIMEOUT)
            except RefusedError as exc:
                log.info("the brokers refuse to describe %s (%s): unchanged offsets are "
                         "committed again every %.0f s", RETENTION_KEY, exc,
                         OFFSET_REFRESH_S)  # fmt: skip
                return
            except Exception as exc:  # the broker away: hourly meanwhile, and again later
                log.debug("could not read the brokers' %s (%s); trying again in %.0f s",
                          RETENTION_KEY, exc, pause)  # fmt: skip
                time.sleep(pause)  # a retry's backoff on the reader's own thread
                pause = min(pause * 2, _RETRY_MAX)
                continue
            self.retention_minutes = minutes
            self.refresh_every = refresh_interval(minutes)
            log.debug("%s = %g: unchanged offsets are committed again every %.0f s",
                      RETENTION_KEY, minutes, self.refresh_every)  # fmt: skip
            return


class RefusedError(Exception):
    """The brokers refuse to describe their configuration (an authorization error)."""


def read_retention_minutes(config: Mapping[str, Any], timeout: float) -> float:
    """One broker's ``offsets.retention.minutes`` (brokers of a cluster share it).

    The future's own exception is never raised here: its traceback would hold this frame, which
    holds the futures, which hold the exception, a cycle that keeps the admin client alive until
    a cyclic collection, which may run on a librdkafka thread and abort the process when it
    frees a client there (confluent-kafka-python PR 2131). The admin goes with this frame.

    :raises RefusedError: the brokers refuse it (authorization).
    :raises LookupError: no answer, or no such setting.
    """
    admin = AdminClient(dict(config))
    brokers = admin.list_topics(timeout=timeout).brokers
    if not brokers:
        raise LookupError("no broker in the cluster's metadata")
    resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
    futures = admin.describe_configs([resource], request_timeout=timeout)
    future = futures[resource]  # the dict stays whole: the parent future completes it
    try:
        failure = future.exception(timeout=timeout)
    except Exception as exc:  # no answer within the timeout
        raise LookupError(f"no answer: {exc!r}") from None
    if failure is not None:
        text = str(failure)
        del failure, future
        raise (RefusedError if "AUTHORIZATION" in text.upper() else LookupError)(text)
    entries = future.result(0)
    if RETENTION_KEY not in entries:
        raise LookupError(f"the broker's configuration has no {RETENTION_KEY}")
    return float(entries[RETENTION_KEY].value)
