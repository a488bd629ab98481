"""Whether a member still reaches Kafka, for a member that may hold work only while it does.

A member cut off from Kafka but not from ZooKeeper keeps its ZooKeeper session, so nothing in
ZooKeeper ends by itself: in ``key_shared`` mode its range leases would stand, and the keys
behind them wait, for as long as the partition lasts (issue 27: found by
``tests/partitions/test_kafka_cut.py``). Kafka's own groups bound this with
``session.timeout.ms``: a member that has not reached the group coordinator for that long is
out, and librdkafka tells the member itself (partition mode's ``on_lost``). ``key_shared``
reads by manual assignment, without a group, so nobody tells it; this does.

A thread asks the cluster for one topic's metadata every second, through an admin client of
the member's own connection settings (the same addresses, the same network path), and notes
when an answer last came. A probe blocks only that thread, never the poll thread, and a link
that drops packets instead of refusing connections is noticed the same way (no answer).

Example::

    liveness = KafkaLiveness(kafka_config, ["orders"])
    liveness.start()
    if liveness.silent_for() > liveness.bound: ...   # give the work up
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from keyshared.kafka.client_config import client_properties

__all__ = ["KafkaLiveness"]

log = logging.getLogger(__name__)

# The probe's own connection errors are the consumer's too, and the consumer reports them.
_quiet = logging.getLogger("coordinator.plug.kafka_liveness.probe")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False

_PROBE_EVERY_S = 1.0
_PROBE_TIMEOUT_S = 2.0
_DEFAULT_SESSION_TIMEOUT_MS = 45_000  # librdkafka's default session.timeout.ms


class KafkaLiveness:
    """When Kafka last answered this member, and how long a silence it may hold work through.

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
        self._answered = time.monotonic()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._answered = time.monotonic()
        self._thread = threading.Thread(
            target=self._probe, name="keyshared-kafka-liveness", daemon=True
        )
        self._thread.start()

    def silent_for(self) -> float:
        """Seconds since the probe last sent a request that Kafka answered."""
        return time.monotonic() - self._answered

    def answering(self) -> bool:
        """Whether Kafka answered one of the last two probes."""
        return self.silent_for() < 2 * self._every + 0.5

    def stop(self) -> None:
        self._stopping.set()

    def _probe(self) -> None:
        admin = AdminClient(self._config)
        while not self._stopping.wait(self._every):
            sent = time.monotonic()
            try:
                admin.list_topics(topic=self._topic, timeout=_PROBE_TIMEOUT_S)
            except KafkaException:
                continue  # no answer this time; silent_for() grows
            self._answered = sent
