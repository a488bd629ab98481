"""Which records of a batch failed (keyshared.core.batches) and BatchError's own checks."""

from __future__ import annotations

import pytest

import keyshared
from keyshared.core.batches import InvalidBatchError, batch_failures


def test_a_returning_handler_fails_nothing() -> None:
    assert batch_failures(5, None, None) == {}


def test_any_other_exception_fails_every_record_with_it() -> None:
    error = TimeoutError("db down")
    assert batch_failures(3, error, None) == {0: error, 1: error, 2: error}


def test_a_batch_error_fails_only_the_records_it_names() -> None:
    first, second = KeyError("a"), ValueError("b")
    error = keyshared.BatchError({4: second, 1: first})
    assert batch_failures(5, error, error.failures) == {1: first, 4: second}


def test_an_index_outside_the_batch_fails_every_record_and_says_which() -> None:
    error = keyshared.BatchError({1: KeyError("a"), 7: KeyError("b")})
    failures = batch_failures(3, error, error.failures)
    assert sorted(failures) == [0, 1, 2]
    [invalid] = set(failures.values())
    assert isinstance(invalid, InvalidBatchError)
    assert "index 7" in str(invalid) and "held 3 record(s)" in str(invalid)
    assert invalid.__cause__ is error


@pytest.mark.parametrize(
    ("failures", "problem"),
    [
        ({}, ValueError),
        ({-1: KeyError()}, TypeError),
        ({"0": KeyError()}, TypeError),
        ({True: KeyError()}, TypeError),
        ({0: "not an exception"}, TypeError),
    ],
)
def test_batch_error_refuses_what_is_not_index_to_exception(
    failures: dict[object, object], problem: type[Exception]
) -> None:
    with pytest.raises(problem):
        keyshared.BatchError(failures)  # type: ignore[arg-type]


def test_batch_error_message_names_the_failures() -> None:
    error = keyshared.BatchError({i: KeyError(i) for i in range(5)})
    assert str(error).startswith("5 record(s) of the batch failed (0: KeyError(0)")
    assert "and 2 more" in str(error)
    assert isinstance(error, keyshared.KeySharedError)
