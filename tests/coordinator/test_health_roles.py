"""``/readyz`` of coordinated members: each mode's membership reports its role.

- ``exclusive``: the active member and a healthy standby are both ready (a rollout must not
  wait for a standby to become active), and they say which is which; a standby whose session
  expired stands by again with its new session.
- ``key_shared``: members are ready once the leader's plan is applied, slot ranges or none.
"""

from __future__ import annotations

from typing import Any

from tests.coordinator.conftest import WAIT_S, expire_session
from tests.coordinator.members import StartMember
from tests.helpers import produce, wait_until
from tests.kafka.support.inprocess import Recorder
from tests.kafka.support.probes import probe


def test_active_and_standby_are_ready_and_say_which(
    kafka_bootstrap: str,
    zookeeper_hosts: str,
    new_topic: Any,
    new_group: Any,
    start: StartMember,  # after new_topic: members stop before their topic is deleted
) -> None:
    topic, group = new_topic(2), new_group("ex-health")
    produce(kafka_bootstrap, topic, [(p, b"k%d" % p, b"1") for p in (0, 1)])
    journal = Recorder()
    options = {"mode": "exclusive", "poison": "block", "metrics_port": 0, "session_timeout": 4.0}
    a = start(group, topic, journal, member="A", **options)
    wait_until(lambda: journal.finished() == 2, "A to become active and process", WAIT_S)
    b = start(group, topic, Recorder(), member="B", **options)

    def role(run: Any) -> tuple[int, str, int]:
        status, body = probe(run.consumer, "/readyz")
        return status, body["role"], body["partitions"]

    wait_until(lambda: role(b) == (200, "standby", 0), "B to be a ready standby", WAIT_S)
    assert role(a) == (200, "active", 2)
    assert probe(b.consumer, "/healthz")[0] == 200

    expire_session(b.zk.client, zookeeper_hosts)  # type: ignore[attr-defined]
    # Fenced until the renewed session stands by again; then ready once more.
    wait_until(lambda: role(b) == (200, "standby", 0), "B to stand by again", WAIT_S)
    assert role(a) == (200, "active", 2)


def test_key_shared_members_are_ready_once_the_plan_is_applied(
    kafka_bootstrap: str,
    zookeeper_hosts: str,
    new_topic: Any,
    new_group: Any,
    start: StartMember,
) -> None:
    topic, group = new_topic(2), new_group("ks-health")
    a = start(group, topic, Recorder(), member="A", metrics_port=0)
    b = start(group, topic, Recorder(), member="B", metrics_port=0)
    for run in (a, b):
        wait_until(
            lambda run=run: probe(run.consumer, "/readyz")[0] == 200, "a ready member", WAIT_S
        )
        assert probe(run.consumer, "/readyz")[1]["role"] == "member"
    # The two members split the slot space: both read both partitions.
    wait_until(
        lambda: all(probe(r.consumer, "/readyz")[1]["partitions"] == 2 for r in (a, b)),
        "both members to read both partitions",
        WAIT_S,
    )
