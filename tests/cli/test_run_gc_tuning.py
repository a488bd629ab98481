"""``keyshared run`` tunes its own process's garbage collector, once the consumer is built.

No broker: the consumer is replaced by a stand-in that notes when it was built and run, and the
process-wide calls (``gc``'s, the signal handlers) are replaced so the test process keeps its
own settings.
"""

from __future__ import annotations

import faulthandler
import gc
import importlib
import signal
from typing import Any

import pytest
from click.testing import CliRunner

import keyshared.consumer.key_shared_consumer as consumer_module

run_module = importlib.import_module("keyshared.cli.run")  # the package's `run` is the command

HANDLER = "tests.cli.test_run_gc_tuning:handle"


def handle(record: Any) -> None:
    """The handler the command loads; never called (the consumer is a stand-in)."""


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[int, ...]]]:
    """The collector calls made, in order, instead of making them."""
    calls: list[tuple[str, tuple[int, ...]]] = []

    def collect(*generation: int) -> int:
        calls.append(("collect", generation))
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(("freeze", ())))
    monkeypatch.setattr(gc, "set_threshold", lambda *a: calls.append(("set_threshold", a)))
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    monkeypatch.setattr(faulthandler, "register", lambda *a, **k: None)

    class StandIn:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            calls.append(("built", ()))

        def run(self) -> None:
            calls.append(("run", ()))

        def stop(self) -> None:
            """Never asked: no signal in these tests."""

    monkeypatch.setattr(consumer_module, "KeySharedConsumer", StandIn)
    return calls


def invoke(*extra: str, env: dict[str, str] | None = None) -> None:
    args = [HANDLER, "-b", "127.0.0.1:1", "-g", "g", "-t", "t", "--mode", "partition", *extra]
    result = CliRunner().invoke(run_module.run, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_the_collector_is_tuned_after_the_consumer_is_built_and_before_it_runs(
    collector: list[tuple[str, tuple[int, ...]]],
) -> None:
    invoke()
    _, middle, oldest = gc.get_threshold()
    assert collector == [
        ("built", ()),
        ("collect", ()),
        ("freeze", ()),
        ("set_threshold", (run_module.GC_YOUNG_THRESHOLD, middle, oldest)),
        ("run", ()),
    ]


@pytest.mark.parametrize(
    ("extra", "env"), [(("--no-gc-tuning",), None), ((), {"KEYSHARED_GC_TUNING": "0"})]
)
def test_turned_off_the_collector_keeps_pythons_settings(
    collector: list[tuple[str, tuple[int, ...]]],
    extra: tuple[str, ...],
    env: dict[str, str] | None,
) -> None:
    invoke(*extra, env=env)
    assert collector == [("built", ()), ("run", ())]
