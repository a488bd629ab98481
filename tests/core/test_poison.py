"""Tests for retry decisions, backoff, poison policies and their validation."""

from __future__ import annotations

import doctest
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keyshared.core import poison as poison_module
from keyshared.core.poison import (
    DeserializationError,
    DoNotRetry,
    PoisonPolicy,
    Retry,
    RetryPolicy,
    Terminal,
    backoff,
    decide,
    validate_policy_for_mode,
)

NO_JITTER = RetryPolicy(max_attempts=10, initial_backoff=0.2, max_backoff=5.0, jitter=0.0)


def test_defaults() -> None:
    policy = RetryPolicy()
    assert policy.max_attempts == 3
    assert policy.initial_backoff == 0.2
    assert policy.max_backoff == 30.0
    assert policy.multiplier == 2.0
    assert policy.jitter == 0.2
    assert policy.retriable == (Exception,)
    assert policy.non_retriable == ()


def test_policy_properties() -> None:
    assert [p.value for p in PoisonPolicy] == [
        "drop",
        "dead_letter",
        "block",
        "block_and_dead_letter",
        "park",
    ]
    dead_letters = {p for p in PoisonPolicy if p.dead_letters}
    blocks = {p for p in PoisonPolicy if p.blocks}
    assert dead_letters == {
        PoisonPolicy.DEAD_LETTER,
        PoisonPolicy.BLOCK_AND_DEAD_LETTER,
        PoisonPolicy.PARK,
    }
    assert blocks == {PoisonPolicy.BLOCK, PoisonPolicy.BLOCK_AND_DEAD_LETTER}
    assert [p for p in PoisonPolicy if p.parks] == [PoisonPolicy.PARK]
    assert PoisonPolicy("park") is PoisonPolicy.PARK
    assert isinstance(PoisonPolicy.DROP, str) and PoisonPolicy.DROP.value == "drop"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"initial_backoff": -0.1}, "initial_backoff"),
        ({"initial_backoff": float("nan")}, "initial_backoff"),
        ({"max_backoff": float("inf")}, "max_backoff"),
        ({"initial_backoff": 5.0, "max_backoff": 1.0}, "max_backoff"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"multiplier": "2"}, "multiplier"),
        ({"jitter": 1.5}, "jitter"),
        ({"jitter": -0.1}, "jitter"),
        ({"retriable": [Exception]}, "retriable"),
        ({"non_retriable": (int,)}, "non_retriable"),
    ],
)
def test_validation_names_the_option(options: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        RetryPolicy(**options)  # type: ignore[arg-type]


def test_decide_retries_then_exhausts() -> None:
    rng = random.Random(1)
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.5, jitter=0.0)
    assert decide(1, RuntimeError(), policy, rng) == Retry(0.5)
    assert decide(2, RuntimeError(), policy, rng) == Retry(1.0)
    assert decide(3, RuntimeError(), policy, rng) == Terminal("exhausted")


def test_one_attempt_means_no_retry() -> None:
    policy = RetryPolicy(max_attempts=1)
    assert decide(1, RuntimeError(), policy, random.Random()) == Terminal("exhausted")


def test_terminal_reasons() -> None:
    rng = random.Random(1)
    policy = RetryPolicy(
        max_attempts=5, retriable=(OSError, ValueError), non_retriable=(PermissionError,)
    )
    assert isinstance(decide(1, TimeoutError(), policy, rng), Retry)
    assert decide(1, PermissionError(), policy, rng) == Terminal("not_retriable")
    assert decide(1, KeyError(), policy, rng) == Terminal("not_retriable")
    assert decide(1, DoNotRetry("bad input"), policy, rng) == Terminal("do_not_retry")
    error = DeserializationError("value", "not JSON")
    assert decide(1, error, policy, rng) == Terminal("deserialization")


def test_base_exceptions_are_not_retried_by_default() -> None:
    assert decide(1, KeyboardInterrupt(), RetryPolicy(), random.Random()) == Terminal(
        "not_retriable"
    )


def test_do_not_retry_wraps_its_cause() -> None:
    cause = ValueError("negative amount")
    error = DoNotRetry(cause=cause)
    assert error.cause is cause and error.__cause__ is cause
    assert "negative amount" in str(error)
    assert str(DoNotRetry()) == "do not retry"


def test_deserialization_error_says_which_part() -> None:
    cause = UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
    error = DeserializationError("key", cause)
    assert error.part == "key"
    assert error.__cause__ is cause
    assert str(error).startswith("cannot deserialize the key: ")
    assert str(DeserializationError("value")) == "cannot deserialize the value"
    assert (
        str(DeserializationError("value", "not JSON")) == "cannot deserialize the value: not JSON"
    )
    assert DeserializationError("value", "not JSON").cause is None
    with pytest.raises(ValueError, match="part"):
        DeserializationError("header")  # type: ignore[arg-type]


def test_backoff_grows_then_caps() -> None:
    rng = random.Random(0)
    delays = [backoff(attempt, NO_JITTER, rng) for attempt in range(1, 10)]
    assert delays[:5] == [0.2, 0.4, 0.8, 1.6, 3.2]
    assert delays[5:] == [5.0, 5.0, 5.0, 5.0]


def test_backoff_survives_huge_attempt_numbers() -> None:
    assert backoff(100_000, NO_JITTER, random.Random()) == 5.0
    zero = RetryPolicy(initial_backoff=0.0, max_backoff=0.0, jitter=0.5)
    assert backoff(100_000, zero, random.Random()) == 0.0


@given(
    attempt=st.integers(min_value=1, max_value=200),
    initial=st.floats(min_value=0.0, max_value=10.0),
    extra=st.floats(min_value=0.0, max_value=100.0),
    multiplier=st.floats(min_value=1.0, max_value=10.0),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    seed=st.integers(),
)
def test_backoff_is_bounded_and_jitter_is_within_fraction(
    attempt: int, initial: float, extra: float, multiplier: float, jitter: float, seed: int
) -> None:
    policy = RetryPolicy(
        initial_backoff=initial,
        max_backoff=initial + extra,
        multiplier=multiplier,
        jitter=jitter,
    )
    delay = backoff(attempt, policy, random.Random(seed))
    assert 0.0 <= delay <= policy.max_backoff
    unjittered = RetryPolicy(
        initial_backoff=initial, max_backoff=initial + extra, multiplier=multiplier, jitter=0.0
    )
    plain = backoff(attempt, unjittered, random.Random(seed))
    assert plain * (1 - jitter) - 1e-9 <= delay <= plain * (1 + jitter) + 1e-9


@given(seed=st.integers())
def test_backoff_without_jitter_is_monotonic(seed: int) -> None:
    rng = random.Random(seed)
    delays = [backoff(attempt, NO_JITTER, rng) for attempt in range(1, 40)]
    assert delays == sorted(delays)


def test_jitter_is_reproducible_with_the_same_seed() -> None:
    policy = RetryPolicy(jitter=0.5)
    first = [backoff(2, policy, random.Random(42)) for _ in range(3)]
    assert len(set(first)) == 1
    spread = {backoff(2, policy, random.Random(seed)) for seed in range(50)}
    assert len(spread) > 1 and min(spread) >= 0.2 and max(spread) <= 0.6


@pytest.mark.parametrize("mode", ["partition", "key_shared"])
@pytest.mark.parametrize("policy", list(PoisonPolicy))
def test_every_policy_is_valid_outside_exclusive(policy: PoisonPolicy, mode: str) -> None:
    assert validate_policy_for_mode(policy, mode) is policy
    assert validate_policy_for_mode(policy.value, mode) is policy


@pytest.mark.parametrize("policy", ["drop", "dead_letter", "park"])
def test_exclusive_rejects_policies_that_skip(policy: str) -> None:
    with pytest.raises(ValueError, match="poison") as caught:
        validate_policy_for_mode(policy, "exclusive")
    assert "exclusive" in str(caught.value) and policy in str(caught.value)


@pytest.mark.parametrize("policy", ["block", "block_and_dead_letter"])
def test_exclusive_accepts_blocking_policies(policy: str) -> None:
    assert validate_policy_for_mode(policy, "exclusive").blocks


def test_unknown_policy_or_mode_is_named() -> None:
    with pytest.raises(ValueError, match="poison must be one of"):
        validate_policy_for_mode("skip", "partition")
    with pytest.raises(ValueError, match="mode must be one of"):
        validate_policy_for_mode("drop", "shared")


def test_docstring_examples_run() -> None:
    results = doctest.testmod(poison_module)
    assert results.attempted > 0 and results.failed == 0
