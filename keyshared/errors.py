"""Errors raised by keyshared, each named for what went wrong."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "BatchError",
    "ConfigurationError",
    "KeySharedError",
    "OutputError",
    "UnreachableError",
]


class KeySharedError(Exception):
    """Base class of keyshared's own errors."""


class ConfigurationError(KeySharedError, ValueError):
    """An option is invalid; raised at construction, naming the option."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"invalid option {option!r}: {problem}")
        self.option = option


class OutputError(KeySharedError, ValueError):
    """``record.output.produce`` refused a message the transactional producer would refuse
    (type, size, topic), or the record's attempt already ended. Raised inside the handler, so
    the record's attempt fails and takes the retry and poison path."""

    def __init__(self, topic: object, problem: str) -> None:
        super().__init__(f"output to topic {topic!r} refused: {problem}")
        self.topic = topic


class UnreachableError(KeySharedError, ConnectionError):
    """A broker or ZooKeeper did not answer within the bounded startup time."""


class BatchError(KeySharedError):
    """Raised by a batch handler to fail some records of its batch and settle the rest.

    ``failures`` maps an index into the batch (the list the handler received) to the
    exception that record failed with. Every record not named counts as done; each named one
    follows the retry and poison policy on its own, exactly as if a single-record handler had
    raised that exception for it (``keyshared.DoNotRetry`` goes straight to the poison
    policy). Any other exception from a batch handler fails every record of the batch.

    Example::

        def handle(batch: list[keyshared.Record]) -> None:
            failures = {}
            for index, record in enumerate(batch):
                try:
                    store(record)
                except ValueError as exc:
                    failures[index] = exc
            if failures:
                raise keyshared.BatchError(failures)

    :param failures: batch index -> the exception of that record (at least one entry).
    """

    def __init__(self, failures: Mapping[int, BaseException]) -> None:
        failures = dict(failures)
        if not failures:
            raise ValueError("BatchError needs at least one failed record (index -> exception)")
        for index, error in failures.items():
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise TypeError(f"BatchError keys are batch indices (ints >= 0), got {index!r}")
            if not isinstance(error, BaseException):
                raise TypeError(f"BatchError[{index}] must be an exception, got {error!r}")
        shown = ", ".join(f"{i}: {e!r}" for i, e in sorted(failures.items())[:3])
        more = f" and {len(failures) - 3} more" if len(failures) > 3 else ""
        super().__init__(f"{len(failures)} record(s) of the batch failed ({shown}{more})")
        self.failures: dict[int, BaseException] = failures
