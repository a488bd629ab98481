"""``keyshared run --retry-backoff``: the wait before a failed record's retry reaches the
consumer's retry policy, and a wait that is no number of seconds is refused up front.

No broker: the consumer is replaced by a stand-in that keeps the arguments it was built with.
"""

from __future__ import annotations

import faulthandler
import gc
import importlib
import signal
from typing import Any

import pytest
from click.testing import CliRunner, Result

import keyshared.consumer.key_shared_consumer as consumer_module
from keyshared.core.poison import RetryPolicy

run_module = importlib.import_module("keyshared.cli.run")  # the package's `run` is the command

HANDLER = "tests.cli.test_run_retry_backoff:handle"


def handle(record: Any) -> None:
    """The handler the command loads; never called (the consumer is a stand-in)."""


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of every consumer the command built."""
    kwargs_seen: list[dict[str, Any]] = []
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    monkeypatch.setattr(faulthandler, "register", lambda *a, **k: None)
    monkeypatch.setattr(gc, "freeze", lambda: None)
    monkeypatch.setattr(gc, "set_threshold", lambda *a: None)

    class StandIn:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs_seen.append(kwargs)

        def run(self) -> None:
            """Returns at once: the command then exits."""

        def stop(self) -> None:
            """Never asked: no signal in these tests."""

    monkeypatch.setattr(consumer_module, "KeySharedConsumer", StandIn)
    return kwargs_seen


def invoke(*extra: str) -> Result:
    args = [HANDLER, "-b", "127.0.0.1:1", "-g", "g", "-t", "t", "--mode", "partition", *extra]
    return CliRunner().invoke(run_module.run, args, catch_exceptions=False)


def test_the_backoff_reaches_the_retry_policy(built: list[dict[str, Any]]) -> None:
    result = invoke("--retry-backoff", "2.5", "--max-attempts", "4")
    assert result.exit_code == 0, result.output
    retry = built[0]["retry"]
    assert isinstance(retry, RetryPolicy)
    assert (retry.initial_backoff, retry.max_attempts) == (2.5, 4)


def test_a_backoff_longer_than_the_cap_raises_the_cap(built: list[dict[str, Any]]) -> None:
    """The cap bounds the later, doubled waits; a first wait above it is the operator's wish."""
    result = invoke("--retry-backoff", "45")
    assert result.exit_code == 0, result.output
    assert (built[0]["retry"].initial_backoff, built[0]["retry"].max_backoff) == (45.0, 45.0)


def test_without_the_option_the_library_default_applies(built: list[dict[str, Any]]) -> None:
    assert invoke().exit_code == 0
    assert built[0]["retry"].initial_backoff == RetryPolicy().initial_backoff


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "-inf", "soon"])
def test_a_wait_that_is_no_number_of_seconds_is_a_usage_error(
    built: list[dict[str, Any]], value: str
) -> None:
    result = invoke(f"--retry-backoff={value}")
    assert result.exit_code == 2, result.output
    assert "--retry-backoff" in result.output
    assert not built, "the consumer was built with a wait it cannot keep"


def test_zero_retries_at_once(built: list[dict[str, Any]]) -> None:
    assert invoke("--retry-backoff", "0").exit_code == 0
    assert built[0]["retry"].initial_backoff == 0.0
