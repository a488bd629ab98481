"""The errors of the Spark jobs, each named for what went wrong, so the CLI can print one line.

All are :class:`keyshared.errors.KeySharedError`; none is raised for a bad record (those are
reported in the job's result rows), only for a job that cannot run at all.
"""

from __future__ import annotations

from keyshared.errors import KeySharedError

__all__ = [
    "BrokerUnreachableError",
    "EmptyRangeError",
    "MissingJarsError",
    "ParkedKeysError",
    "SparkJobError",
    "TopicNotFoundError",
]


class SparkJobError(KeySharedError):
    """A Spark replay or reprocess job cannot run as asked."""


class MissingJarsError(SparkJobError):
    """Spark's Kafka source jars are neither given nor fetchable."""


class BrokerUnreachableError(SparkJobError):
    """Kafka did not answer within the bounded time."""


class TopicNotFoundError(SparkJobError):
    """A topic the job reads or writes does not exist."""


class EmptyRangeError(SparkJobError):
    """The selected offset or time range holds no record."""


class ParkedKeysError(SparkJobError):
    """Keys to replay are still parked; replaying them would only park them again."""
