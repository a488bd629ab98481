"""``tracing=`` is checked at construction, and costs nothing when it is off (no broker here)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import keyshared
from keyshared.runtime.tracing import HandlerTracer, handler_tracer

CONFIG = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g"}


def handle(record: keyshared.Record) -> None:
    pass


def test_tracing_off_wraps_nothing() -> None:
    consumer = keyshared.KeySharedConsumer(CONFIG, ["t"], handle)
    assert consumer._handler is handle and consumer._tracer is None


def test_tracing_on_wraps_the_handler_with_the_given_provider() -> None:
    consumer = keyshared.KeySharedConsumer(CONFIG, ["t"], handle, tracing=TracerProvider())
    assert isinstance(consumer._tracer, HandlerTracer)
    assert consumer._handler is not handle


def test_tracing_true_uses_the_global_provider() -> None:
    assert isinstance(handler_tracer(True, "g", None), HandlerTracer)


def test_a_wrong_tracing_value_names_the_option() -> None:
    with pytest.raises(keyshared.ConfigurationError, match=r"'tracing'.*TracerProvider"):
        keyshared.KeySharedConsumer(CONFIG, ["t"], handle, tracing="yes")


def test_tracing_without_the_extra_says_how_to_install_it(monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # import fails as if not installed
    with pytest.raises(keyshared.ConfigurationError, match=r"'tracing'.*keyshared\[otel\]"):
        keyshared.KeySharedConsumer(CONFIG, ["t"], handle, tracing=True)


def test_record_context_gives_the_pull_style_its_producers_trace() -> None:
    from opentelemetry import trace

    from keyshared.runtime.tracing import record_context

    traceparent = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    record = keyshared.Record(b"k", b"v", "t", 0, 1, (("traceparent", traceparent),), None, 1)
    parent = trace.get_current_span(record_context(record)).get_span_context()
    assert (parent.trace_id, parent.span_id) == (0x0AF7651916CD43DD8448EB211C80319C,
                                                 0xB7AD6B7169203331)  # fmt: skip
