"""A real OpenTelemetry SDK TracerProvider whose finished spans a test can wait for.

The SDK's own in-memory exporter keeps the spans; this subclass only adds a condition to wait
on, so a test waits for the spans it expects instead of polling or sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["SpanSink", "traced_headers"]


class SpanSink(InMemorySpanExporter):
    """The SDK's in-memory exporter, plus :meth:`wait_for`."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self))

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        with self._cond:
            self._cond.notify_all()
        return result

    def wait_for(
        self, matching: Callable[[ReadableSpan], bool], count: int, timeout: float = 60.0
    ) -> list[ReadableSpan]:
        """The first ``count`` finished spans that match, once there are that many."""

        def found() -> list[ReadableSpan]:
            return [s for s in self.get_finished_spans() if matching(s)]

        with self._cond:
            ok = self._cond.wait_for(lambda: len(found()) >= count, timeout)
        spans = found()
        assert ok, f"{len(spans)} of {count} spans finished: {[s.name for s in spans]}"
        return spans[:count]


def traced_headers(provider: TracerProvider, name: str = "send") -> tuple[list[Any], Any]:
    """Headers carrying a fresh producer span's W3C context, and that span's context."""
    with provider.get_tracer("test-producer").start_as_current_span(
        name, kind=trace.SpanKind.PRODUCER
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return [(k, v.encode()) for k, v in carrier.items()], span.get_span_context()
