"""Whether a member still reaches Kafka, for a member that may hold work only while it does.

A member cut off from Kafka but not from ZooKeeper keeps its ZooKeeper session, so nothing in
ZooKeeper ends by itself: in ``key_shared`` mode its range leases would stand, and the keys
behind them wait, for as long as the partition lasts (``tests/partitions/test_kafka_cut.py``
cuts a member off). Kafka's own groups bound this with
``session.timeout.ms``: a member that has not reached the group coordinator for that long is
out, and librdkafka tells the member itself (partition mode's ``on_lost``). ``key_shared``
reads by manual assignment, without a group, so nobody tells it; this does.

A thread asks the cluster for one topic's metadata every second, through an admin client of
the member's own connection settings (the same addresses, the same network path), and notes
since when its requests go unanswered. A probe blocks only that thread, never the poll
thread, and a link that drops packets instead of refusing connections is noticed the same way
(no answer). A member frozen meanwhile (SIGSTOP, a GC pause) learns nothing about Kafka, so
only probes that were sent and went unanswered count.

Example::

    liveness = KafkaLiveness(kafka_config, ["orders"])
    liveness.start()
    if liveness.silent_for() > liveness.bound: ...   # give the work up
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from kazoo.exceptions import KazooException

from keyshared.kafka.client_config import client_properties

__all__ = ["KafkaLiveness", "PlanWithdrawal", "RoleWithdrawal"]

log = logging.getLogger(__name__)

# The probe's own connection errors are the consumer's too, and the consumer reports them.
_quiet = logging.getLogger("keyshared.modes.kafka_liveness.probe")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False

_PROBE_EVERY_S = 1.0
_PROBE_TIMEOUT_S = 2.0
_DEFAULT_SESSION_TIMEOUT_MS = 45_000  # librdkafka's default session.timeout.ms
_ACTIVE_GRACE_S = 5.0  # beyond session.timeout.ms: standbys that lost Kafka too leave first
_QUEUE_LOOK_EVERY_S = 1.0  # how often a silent active member looks for a queued standby


class KafkaLiveness:
    """Since when Kafka leaves this member unanswered, and how long a silence it may hold
    work through.

    :param kafka_config: the consumer's librdkafka config (its connection settings are reused).
    :param topics: the member's topics; the probe asks for the first one's metadata.
    :param probe_every: seconds between probes.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        topics: list[str],
        probe_every: float = _PROBE_EVERY_S,
    ) -> None:
        self.bound = (
            int(kafka_config.get("session.timeout.ms", _DEFAULT_SESSION_TIMEOUT_MS)) / 1000.0
        )
        """Seconds of silence after which the member gives its work up: the consumer's
        ``session.timeout.ms``, the bound after which Kafka's own group drops a silent member."""
        self._config = {**client_properties(kafka_config), "logger": _quiet}
        self._config.pop("error_cb", None)
        self._topic = next((t for t in topics if not t.startswith("^")), None)
        self._every = probe_every
        # When the current run of unanswered probes began (sent); None while Kafka answers.
        # Counted from failures, not from the last answer: a member frozen (SIGSTOP, a GC
        # pause) froze its probe too, and has learnt nothing about Kafka meanwhile.
        self._failing_since: float | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._probe, name="keyshared-kafka-liveness", daemon=True
        )
        self._thread.start()

    def silent_for(self) -> float:
        """Seconds since the first of the probes that went unanswered in a row (0: answered)."""
        failing_since = self._failing_since
        return 0.0 if failing_since is None else time.monotonic() - failing_since

    def answering(self) -> bool:
        """Whether Kafka answered the last probe."""
        return self._failing_since is None

    def stop(self) -> None:
        self._stopping.set()

    def _probe(self) -> None:
        admin = AdminClient(self._config)
        while not self._stopping.wait(self._every):
            sent = time.monotonic()
            try:
                admin.list_topics(topic=self._topic, timeout=_PROBE_TIMEOUT_S)
            except KafkaException:
                if self._failing_since is None:
                    self._failing_since = sent
                continue
            self._failing_since = None


class PlanWithdrawal:
    """Give the work up while Kafka is silent past ``session.timeout.ms``, and come back once
    it answers. In ``key_shared`` leaving is the ordinary path: the leader plans without the
    member, and its ranges are drained, their cursors written (to ZooKeeper, which it still
    reaches) and their leases released. In ``exclusive`` mode the member gives up the active
    role, or its place in the queue for it, and contends again once Kafka answers."""

    def __init__(self, liveness: KafkaLiveness, member: str, group: str) -> None:
        self._kafka = liveness
        self._member = member
        self._group = group
        self.withdrawn = False  # out of the plan (or the queue) while Kafka is silent

    def check(self, leave: Callable[[], None], rejoin: Callable[[], None]) -> None:
        """Poll thread, from the member's tick (only while ZooKeeper is connected)."""
        kafka = self._kafka
        try:
            if not self.withdrawn and kafka.silent_for() > kafka.bound:
                log.warning(
                    "member %s: Kafka silent for %.1fs (session.timeout.ms %gs): giving up its "
                    "work in %s so that it moves on; back when Kafka answers",
                    self._member, kafka.silent_for(), kafka.bound, self._group,
                )  # fmt: skip
                leave()
                self.withdrawn = True
            elif self.withdrawn and kafka.answering():
                log.info("member %s: Kafka answers again: rejoining %s", self._member, self._group)
                rejoin()
                self.withdrawn = False
        except KazooException as exc:
            log.warning(
                "member %s: leaving or rejoining the plan failed (%r); retrying", self._member, exc
            )


class RoleWithdrawal:
    """``exclusive`` mode's way of giving its work up while Kafka is silent.

    A standby leaves the queue for the lock past ``session.timeout.ms``, and queues again once
    Kafka answers. The active member gives the role up only a grace period later, and only if
    a standby is queued, that is, reaches Kafka. When Kafka is away for everyone (the one
    broker restarting), the standbys have left the queue by then and the active member keeps
    the role: a failover then would only redo everything it finished and could not commit.

    :param standby_queued: whether another member queues for the lock (ZooKeeper; may raise).
    """

    def __init__(
        self, liveness: KafkaLiveness, member: str, group: str, standby_queued: Callable[[], bool]
    ) -> None:
        self._kafka = liveness
        self._member = member
        self._group = group
        self._standby_queued = standby_queued
        self._next_look = 0.0
        self.withdrawn = False  # out of the queue, or of the role, while Kafka is silent

    def check(self, active: bool, leave: Callable[[], None], rejoin: Callable[[], None]) -> None:
        """Poll thread, from the member's tick (only while ZooKeeper is connected)."""
        kafka = self._kafka
        if self.withdrawn:
            if kafka.answering():
                log.info(
                    "member %s: Kafka answers again: contending in %s", self._member, self._group
                )
                self.withdrawn = False
                rejoin()
            return
        silent = kafka.silent_for()
        if silent <= kafka.bound or (active and not self._handover_possible(silent)):
            return
        log.warning(
            "member %s: Kafka silent for %.1fs (session.timeout.ms %gs): giving up %s in %s so "
            "that a member that reaches Kafka takes over; back when Kafka answers",
            self._member, silent, kafka.bound, "the active role" if active else "its place",
            self._group,
        )  # fmt: skip
        self.withdrawn = True
        leave()

    def _handover_possible(self, silent: float) -> bool:
        if silent <= self._kafka.bound + _ACTIVE_GRACE_S or time.monotonic() < self._next_look:
            return False
        self._next_look = time.monotonic() + _QUEUE_LOOK_EVERY_S
        try:
            return self._standby_queued()
        except KazooException:
            return False  # ZooKeeper cannot tell: keep the role, look again
