"""Micro-benchmark of the tracing wrapper: what a handler call costs with ``tracing=`` on.

Disabled by default (``--benchmark-disable`` in pyproject's addopts: each runs once as a test).
Measure with::

    pytest tests/bench/test_tracing_bench.py --benchmark-enable -s

The provider is the real SDK's with no exporter, so the figure is keyshared's wrapper plus the
SDK's own span creation (which dominates); an exporter adds its own cost on top. Nothing here
asserts a time. With ``tracing=False`` the handler is not wrapped at all
(``tests/runtime/test_tracing_options.py``).
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from pytest_benchmark.fixture import BenchmarkFixture

from keyshared.record import Header, Record
from keyshared.runtime.tracing import HandlerTracer

TRACEPARENT = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def noop(record: Record) -> None:
    pass


@pytest.mark.parametrize("headers", [(("traceparent", TRACEPARENT),), ()],
                         ids=["traceparent", "no-header"])  # fmt: skip
def test_traced_noop_handler_call(benchmark: BenchmarkFixture, headers: tuple[Header, ...]) -> None:
    provider = TracerProvider()
    traced = HandlerTracer(provider, "group", None).wrap(noop, is_async=False)
    record = Record(b"key", b"value", "topic", 0, 1, headers, None, 1, b"key")
    benchmark(traced, record)
    provider.shutdown()
