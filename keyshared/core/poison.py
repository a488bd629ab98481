"""Retry and terminal decisions for a failed handler call, as pure functions.

Why pure: whether to retry, how long to wait and what happens after the last attempt are the
decisions that most need exhaustive tests, and they depend only on the attempt number, the error
and the configuration. The worker pool calls ``decide`` and carries out the answer; the random
source for jitter is passed in, so tests are reproducible and members do not share a global RNG.

The terminal policies, applied when retrying is over:

- ``drop``: count the record as done and move on (other records of the key continue).
- ``dead_letter``: write the record to the DLQ, then count it as done.
- ``block``: stop the key (other keys continue) until an operator releases it.
- ``block_and_dead_letter``: write to the DLQ and stop the key.
- ``park``: write this record and every later record of the key to the DLQ until the key is
  released, so replaying the DLQ restores the key's order.

Example::

    >>> import random
    >>> policy = RetryPolicy(max_attempts=3, initial_backoff=0.5, jitter=0.0)
    >>> decide(1, TimeoutError(), policy, random.Random(7))
    Retry(delay=0.5)
    >>> decide(3, TimeoutError(), policy, random.Random(7))
    Terminal(reason='exhausted')
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from keyshared.core.modes import MODES

__all__ = [
    "DeserializationError",
    "DoNotRetry",
    "PoisonPolicy",
    "Retry",
    "RetryPolicy",
    "Terminal",
    "TerminalReason",
    "backoff",
    "decide",
    "validate_policy_for_mode",
]


class PoisonPolicy(StrEnum):
    """What happens to a record once retrying is over."""

    DROP = "drop"
    DEAD_LETTER = "dead_letter"
    BLOCK = "block"
    BLOCK_AND_DEAD_LETTER = "block_and_dead_letter"
    PARK = "park"

    @property
    def dead_letters(self) -> bool:
        """Whether the failed record is written to the DLQ."""
        return self in (
            PoisonPolicy.DEAD_LETTER,
            PoisonPolicy.BLOCK_AND_DEAD_LETTER,
            PoisonPolicy.PARK,
        )

    @property
    def blocks(self) -> bool:
        """Whether the key stops (nothing later of that key is processed) until released."""
        return self in (PoisonPolicy.BLOCK, PoisonPolicy.BLOCK_AND_DEAD_LETTER)

    @property
    def parks(self) -> bool:
        """Whether later records of the key go straight to the DLQ until the key is released."""
        return self is PoisonPolicy.PARK


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failing handler call is retried.

    :param max_attempts: total attempts including the first; 1 means no retry.
    :param initial_backoff: seconds before the first retry.
    :param max_backoff: upper bound on any delay, jitter included.
    :param multiplier: growth factor of the delay per attempt (>= 1).
    :param jitter: fraction of the delay added or removed at random (0..1), so that keys that
        failed together (a downstream outage) do not all retry in the same instant.
    :param retriable: exception types worth retrying.
    :param non_retriable: exception types never retried, even if also ``retriable``.
    """

    max_attempts: int = 3
    initial_backoff: float = 0.2
    max_backoff: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.2
    retriable: tuple[type[BaseException], ...] = (Exception,)
    non_retriable: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise ValueError(f"max_attempts must be an integer, got {self.max_attempts!r}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 (1 = no retry), got {self.max_attempts}")
        _check_number("initial_backoff", self.initial_backoff, minimum=0.0)
        _check_number("max_backoff", self.max_backoff, minimum=0.0)
        if self.max_backoff < self.initial_backoff:
            raise ValueError(
                f"max_backoff ({self.max_backoff}) must be >= initial_backoff "
                f"({self.initial_backoff})"
            )
        _check_number("multiplier", self.multiplier, minimum=1.0)
        _check_number("jitter", self.jitter, minimum=0.0, maximum=1.0)
        for name in ("retriable", "non_retriable"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(
                isinstance(kind, type) and issubclass(kind, BaseException) for kind in value
            ):
                raise ValueError(f"{name} must be a tuple of exception types, got {value!r}")


def _check_number(name: str, value: object, minimum: float, maximum: float = math.inf) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not minimum <= value <= maximum or math.isinf(value):
        bounds = f">= {minimum}" if maximum == math.inf else f"in {minimum}..{maximum}"
        raise ValueError(f"{name} must be finite and {bounds}, got {value!r}")


class DoNotRetry(Exception):
    """Raised by a handler to skip the remaining attempts and apply the terminal policy now.

    :param message: why the record cannot succeed.
    :param cause: the underlying error, kept as ``__cause__`` for logs and DLQ headers.
    """

    def __init__(self, message: str = "", cause: BaseException | None = None) -> None:
        super().__init__(message or (repr(cause) if cause is not None else "do not retry"))
        self.cause = cause
        if cause is not None:
            self.__cause__ = cause


class DeserializationError(Exception):
    """A record's key or value could not be deserialized; retrying cannot help.

    :param part: which part failed, ``"key"`` or ``"value"``.
    :param detail: what was wrong, or the deserializer's own error (kept as ``cause`` and
        ``__cause__``), so both ``DeserializationError("value", exc)`` and
        ``DeserializationError("value", "not JSON")`` read naturally.
    """

    def __init__(
        self, part: Literal["key", "value"], detail: str | BaseException | None = None
    ) -> None:
        if part not in ("key", "value"):
            raise ValueError(f"part must be 'key' or 'value', got {part!r}")
        self.part = part
        self.cause = detail if isinstance(detail, BaseException) else None
        text = repr(detail) if self.cause is not None else (detail or "")
        super().__init__(f"cannot deserialize the {part}" + (f": {text}" if text else ""))
        if self.cause is not None:
            self.__cause__ = self.cause


TerminalReason = Literal["exhausted", "not_retriable", "do_not_retry", "deserialization"]


@dataclass(frozen=True)
class Retry:
    """Try the record again after ``delay`` seconds."""

    delay: float


@dataclass(frozen=True)
class Terminal:
    """Stop retrying and apply the poison policy; ``reason`` says why (for logs and headers)."""

    reason: TerminalReason


def decide(
    attempt: int, error: BaseException, retry: RetryPolicy, rng: random.Random
) -> Retry | Terminal:
    """Decide what follows the failure of attempt number ``attempt`` (1-based) with ``error``."""
    if isinstance(error, DeserializationError):
        return Terminal("deserialization")
    if isinstance(error, DoNotRetry):
        return Terminal("do_not_retry")
    if isinstance(error, retry.non_retriable) or not isinstance(error, retry.retriable):
        return Terminal("not_retriable")
    if attempt >= retry.max_attempts:
        return Terminal("exhausted")
    return Retry(backoff(attempt, retry, rng))


def backoff(attempt: int, retry: RetryPolicy, rng: random.Random) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based) before the next one.

    ``initial_backoff * multiplier ** (attempt - 1)``, capped at ``max_backoff``; then jitter
    of up to +/- ``jitter`` of that value, capped again and never negative.
    """
    exponent = max(attempt - 1, 0)
    try:
        growth = retry.multiplier**exponent
    except OverflowError:
        growth = math.inf
    delay = min(retry.initial_backoff * growth, retry.max_backoff) if retry.initial_backoff else 0.0
    if retry.jitter:
        delay *= 1.0 + rng.uniform(-retry.jitter, retry.jitter)
    return min(max(delay, 0.0), retry.max_backoff)


_EXCLUSIVE_POLICIES = (PoisonPolicy.BLOCK, PoisonPolicy.BLOCK_AND_DEAD_LETTER)


def validate_policy_for_mode(policy: PoisonPolicy | str, mode: str) -> PoisonPolicy:
    """Check that the poison policy is allowed in ``mode`` and return it as a ``PoisonPolicy``.

    In ``exclusive`` mode processing is strictly serial per partition, so any policy that lets a
    later record go ahead of a failed one (``drop``, ``dead_letter``, ``park``) would break that
    order; only ``block`` and ``block_and_dead_letter`` are accepted.

    :raises ValueError: naming ``poison`` or ``mode`` when either is unknown or they clash.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    try:
        chosen = PoisonPolicy(policy)
    except ValueError:
        allowed = ", ".join(member.value for member in PoisonPolicy)
        raise ValueError(f"poison must be one of {allowed}; got {policy!r}") from None
    if mode == "exclusive" and chosen not in _EXCLUSIVE_POLICIES:
        raise ValueError(
            f"poison={chosen.value!r} is not allowed with mode='exclusive': skipping a failed "
            "record would let a later one overtake it; use 'block' or 'block_and_dead_letter'"
        )
    return chosen
