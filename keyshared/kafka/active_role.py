"""The active role of an exclusive group: one transactional identity passed from member to member.

Exclusive mode with a coordinator reads with ``assign()``, so the group generation fences
nothing (KIP-447 needs a subscription), and only a shared ``transactional.id`` lets the broker
refuse a stalled ex-active member. The transactional committer
(:class:`~keyshared.kafka.transactions.TransactionalCommitter` built with ``role=True``) holds a
producer of the role only while the member is active; every ``init_transactions`` of it (the
activation's, or a rebuild after a failure) is followed by a check that the lock is still this
member's, so a producer that may commit was always initialised after the last holder's, and
the next holder's initialisation fences it. A fence then means the role went elsewhere: the
member gives the role up, instead of counting fences.

```
            serve_role()            activate(): init + lock still ours
  standby ---------------> no producer -----------------------------> active (producer)
                               ^                                          |
                               |   deactivate() / fenced: role given up   |
                               +------------------------------------------+
```

An ``init_transactions`` the broker refuses for good (the principal may not use the
transactional id, or the cluster) is no failure of one member: every member would win the
lock, fail the same way and hand the role on, for ever. It stops the run instead
(:func:`init_refused_for_good`).
"""

from __future__ import annotations

from typing import Protocol

from confluent_kafka import KafkaError, KafkaException

from keyshared.errors import ConfigurationError

__all__ = ["ActiveRole", "active_role_transactional_id", "init_refused_for_good"]

# Refused for what the principal may do, whatever flags librdkafka sets (it made cluster
# authorization failures fatal only in 1.5: confluentinc/librdkafka#2994).
_NOT_AUTHORIZED = frozenset(
    (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED)
)
# The broker or its transaction coordinator away, or busy: another try (or member) may pass,
# whatever the flags say.
_TRANSIENT = frozenset(
    (
        KafkaError._TIMED_OUT,
        KafkaError._TIMED_OUT_QUEUE,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._WAIT_COORD,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.CONCURRENT_TRANSACTIONS,
    )
)
# Another holder of the id: the role went elsewhere (the caller gives it up).
_FENCES = frozenset(
    (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
)


class ActiveRole(Protocol):
    """A role whose one transactional identity passes from member to member (exclusive mode
    with a coordinator). Implemented by the mode; called by the committer on the poll thread."""

    def still_held(self) -> bool:
        """Whether this member holds the role now: one authoritative read, made after each
        ``init_transactions`` of the role's producer."""

    def fenced(self) -> None:
        """The role's producer was fenced (or could not be confirmed): give the role up."""


def active_role_transactional_id(group: str) -> str:
    """The one ``transactional.id`` of a group's active role: every member of an exclusive
    group uses it, so each new active member's ``init_transactions`` fences the last one's."""
    return f"keyshared-{group}-active"


def init_refused_for_good(exc: KafkaException, transactional_id: str) -> ConfigurationError | None:
    """The error that stops the run if ``exc``, raised by ``init_transactions`` of the role's
    producer, refuses the role to every member alike; None if another try may succeed.

    Refused for good: an authorization failure, and any error librdkafka calls fatal or not
    retriable, unless it is a fence (the role went to another member) or the broker or its
    transaction coordinator being away or busy (a timeout, a lost connection, a coordinator
    moving). Those are retried, by this member or by the next one to win the lock.
    """
    err = exc.args[0] if exc.args else None
    if not isinstance(err, KafkaError):
        return None
    code = err.code()
    retry = code in _FENCES or code in _TRANSIENT or err.retriable() or err.txn_requires_abort()
    if retry and code not in _NOT_AUTHORIZED:
        return None
    hint = (
        "; grant the principal WRITE and DESCRIBE on this TransactionalId (and IDEMPOTENT_WRITE "
        "on the cluster for brokers before 3.0)"
        if code in _NOT_AUTHORIZED
        else ""
    )
    return ConfigurationError(
        "transactional.id",
        f"the broker refuses the exclusive group's active role, transactional.id "
        f"{transactional_id!r}: init_transactions failed with {err.name()} ({err.str()}); no "
        f"member can become active, so this one stops{hint}",
    )
