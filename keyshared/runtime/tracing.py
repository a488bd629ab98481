"""OpenTelemetry spans around handler calls: the optional ``otel`` extra.

Why in keyshared and not in the user's handler: only keyshared knows an attempt's number, why a
call is retried and what happened to a record after its last attempt; and the handler should not
have to parse ``traceparent`` to continue its producer's trace.

One ``process`` span of kind CONSUMER per handler call (so a record retried twice has three),
the child of the W3C trace context found in the record's headers (through the global
propagator, so ``OTEL_PROPAGATORS`` is honoured), with the messaging semantic-convention
attributes. The span is current while the handler runs: a handler that produces or calls out
with an instrumented client continues the trace. A failed attempt's span records the error and
keyshared's decision as an event: ``keyshared.retry`` (with the backoff) or ``keyshared.poison``
(with the policy applied, such as ``dead_letter``). Keys, error messages and tracebacks leave
the process only through the redaction hook, as in log lines.

Nothing here is imported unless tracing is enabled, so a consumer without it pays nothing.

Example::

    from opentelemetry.sdk.trace import TracerProvider
    consumer = KeySharedConsumer(config, ["orders"], handle, tracing=TracerProvider())
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any

from keyshared.core.redaction import (
    ERROR_PREVIEW,
    KEY_PREVIEW,
    REDACTION_INPUT_LIMIT,
    Redactor,
    redacted,
)
from keyshared.errors import ConfigurationError
from keyshared.record import Header, Record

__all__ = ["HandlerTracer", "handler_tracer", "record_context"]

# Attribute names of the OpenTelemetry messaging semantic conventions (Kafka), in one place.
SYSTEM = "messaging.system"
OPERATION_NAME = "messaging.operation.name"
OPERATION_TYPE = "messaging.operation.type"
DESTINATION = "messaging.destination.name"
PARTITION = "messaging.destination.partition.id"
OFFSET = "messaging.kafka.offset"
CONSUMER_GROUP = "messaging.consumer.group.name"
MESSAGE_KEY = "messaging.kafka.message.key"
TOMBSTONE = "messaging.kafka.message.tombstone"
BATCH_COUNT = "messaging.batch.message_count"
# keyshared's own.
ATTEMPT = "keyshared.attempt"
RETRY_EVENT = "keyshared.retry"
RETRY_DELAY = "keyshared.retry.delay_s"
POISON_EVENT = "keyshared.poison"
POISON_POLICY = "keyshared.poison.policy"
POISON_REASON = "keyshared.poison.reason"

_TRACEBACK_LIMIT = 8_000  # characters of a span's exception.stacktrace (its tail)

# The span of the attempt that just raised, until the executor has decided what comes next
# (retry or poison policy) and recorded it. The decision is made on the same thread or task
# right after the handler raised, so a context variable carries it there without a lookup.
_failed_attempt: ContextVar[Any] = ContextVar("keyshared_failed_attempt", default=None)

_INSTALL_HINT = "needs OpenTelemetry: pip install 'keyshared[otel]'"


@functools.cache
def _getter() -> Any:
    """Reads a W3C trace context from Kafka headers (``(name, bytes)`` pairs); built on first
    use so that importing this module never imports OpenTelemetry."""
    from opentelemetry.propagators.textmap import Getter

    class HeaderGetter(Getter[Iterable[Header]]):
        def get(self, carrier: Iterable[Header], key: str) -> list[str] | None:
            # The last occurrence wins, as in Record.header: a later header overrides.
            for name, value in reversed(tuple(carrier)):
                if name == key and value is not None:
                    return [value.decode("utf-8", "replace")]
            return None

        def keys(self, carrier: Iterable[Header]) -> list[str]:
            return [name for name, _ in carrier]

    return HeaderGetter()


def record_context(record: Record) -> Any:
    """The OpenTelemetry context of ``record``'s producer (from its headers), for code that
    processes records outside a handler (the pull style) and wants to continue its trace."""
    from opentelemetry import propagate

    return propagate.extract(record.headers, getter=_getter())


def handler_tracer(tracing: Any, group: str, redact: Redactor | None) -> HandlerTracer | None:
    """The tracer that ``ConsumerOptions.tracing`` asks for, or None when tracing is off.

    ``True`` uses the global TracerProvider (configured by the application or by
    ``opentelemetry-instrument``); a TracerProvider uses that one.
    """
    if tracing is False or tracing is None:
        return None
    try:
        from opentelemetry import trace
    except ImportError:
        raise ConfigurationError("tracing", _INSTALL_HINT) from None
    provider = trace.get_tracer_provider() if tracing is True else tracing
    if not callable(getattr(provider, "get_tracer", None)):
        raise ConfigurationError(
            "tracing", f"must be True, False or an OpenTelemetry TracerProvider, got {tracing!r}"
        )
    return HandlerTracer(provider, group, redact)


class HandlerTracer:
    """Wraps a handler so each call is a span, and records the fate of failed attempts.

    :param provider: an OpenTelemetry ``TracerProvider``.
    :param group: the consumer group, recorded on every span.
    :param redact: ``ConsumerOptions.redact``: applied to the key, error message and traceback.
    """

    def __init__(self, provider: Any, group: str, redact: Redactor | None) -> None:
        from opentelemetry.trace import SpanKind

        self._tracer = provider.get_tracer("keyshared")
        self._group = group
        self._redact = redact
        self._kind = SpanKind.CONSUMER

    def wrap(self, handler: Callable[[Record], Any], is_async: bool) -> Callable[[Record], Any]:
        """``handler`` with a span around each call (an ``async def`` wrapper for a coroutine)."""
        from opentelemetry import trace

        # Not ended on exit (a failed attempt stays open for the decision), and errors are
        # recorded by _raised, redacted, never by use_span with the raw message.
        use_span = trace.use_span

        if is_async:

            @functools.wraps(handler)
            async def traced_async(record: Record) -> Any:
                span = self._start(record)
                with use_span(span, record_exception=False, set_status_on_exception=False):
                    try:
                        result = await handler(record)
                    except BaseException as exc:
                        self._raised(span, exc)
                        raise
                span.end()
                return result

            return traced_async

        @functools.wraps(handler)
        def traced(record: Record) -> Any:
            span = self._start(record)
            with use_span(span, record_exception=False, set_status_on_exception=False):
                try:
                    result = handler(record)
                except BaseException as exc:
                    self._raised(span, exc)
                    raise
            span.end()
            return result

        return traced

    def wrap_batch(
        self, handler: Callable[[list[Record]], Any], is_async: bool
    ) -> Callable[[list[Record]], Any]:
        """A batch handler with one span per call, linked to each record's producer span.

        A batch has many parents, so, as OpenTelemetry's messaging conventions do for batch
        processing, its span starts a trace of its own and carries a link to each record's
        producer context instead of a parent. A failure is recorded on the span, which ends
        with the call: what happens next is decided record by record (retries come back in
        other batches, each with its own span).
        """
        from opentelemetry import trace

        use_span = trace.use_span

        if is_async:

            @functools.wraps(handler)
            async def traced_async(records: list[Record]) -> Any:
                span = self._start_batch(records)
                with use_span(span, record_exception=False, set_status_on_exception=False):
                    try:
                        return await handler(records)
                    except BaseException as exc:
                        self._raised(span, exc, keep_open=False)
                        raise
                    finally:
                        span.end()

            return traced_async

        @functools.wraps(handler)
        def traced(records: list[Record]) -> Any:
            span = self._start_batch(records)
            with use_span(span, record_exception=False, set_status_on_exception=False):
                try:
                    return handler(records)
                except BaseException as exc:
                    self._raised(span, exc, keep_open=False)
                    raise
                finally:
                    span.end()

        return traced

    def retried(self, delay: float) -> None:
        """The attempt that just failed will be retried after ``delay`` seconds."""
        self._settle(RETRY_EVENT, {RETRY_DELAY: delay})

    def poisoned(self, policy: str, reason: str) -> None:
        """The attempt that just failed was the last: ``policy`` applies for ``reason``."""
        self._settle(POISON_EVENT, {POISON_POLICY: policy, POISON_REASON: reason})

    # -- internals ----------------------------------------------------------------------------

    def _start(self, record: Record) -> Any:
        from opentelemetry import propagate

        parent = propagate.extract(record.headers, getter=_getter()) if record.headers else None
        attributes: dict[str, Any] = {
            SYSTEM: "kafka",
            OPERATION_NAME: "process",
            OPERATION_TYPE: "process",
            DESTINATION: record.topic,
            PARTITION: str(record.partition),
            OFFSET: record.offset,
            CONSUMER_GROUP: self._group,
            ATTEMPT: record.attempt,
        }
        if record.raw_key is not None:
            attributes[MESSAGE_KEY] = self._key(record.raw_key)
        if record.value is None:
            attributes[TOMBSTONE] = True
        return self._tracer.start_span(
            f"process {record.topic}", context=parent, kind=self._kind, attributes=attributes
        )

    def _start_batch(self, records: list[Record]) -> Any:
        from opentelemetry import propagate, trace
        from opentelemetry.context import Context

        getter = _getter()
        links = []
        for record in records:
            if record.headers:
                context = trace.get_current_span(
                    propagate.extract(record.headers, getter=getter)
                ).get_span_context()
                if context.is_valid:
                    links.append(trace.Link(context, {OFFSET: record.offset}))
        topics = {record.topic for record in records}
        attributes: dict[str, Any] = {
            SYSTEM: "kafka",
            OPERATION_NAME: "process",
            OPERATION_TYPE: "process",
            CONSUMER_GROUP: self._group,
            BATCH_COUNT: len(records),
        }
        topic = topics.pop() if len(topics) == 1 else None
        if topic is not None:
            attributes[DESTINATION] = topic
        # A new root: the batch's producers are links, not parents (an empty context).
        return self._tracer.start_span(
            f"process {topic}" if topic is not None else "process",
            context=Context(),
            kind=self._kind,
            attributes=attributes,
            links=links,
        )

    def _key(self, raw_key: bytes) -> str:
        """The key as text (UTF-8, bad bytes escaped), cut to a preview, then redacted."""
        text = raw_key[:KEY_PREVIEW].decode("utf-8", "backslashreplace")
        if len(raw_key) > KEY_PREVIEW:
            text += "..."
        return redacted(text, self._redact)

    def _raised(self, span: Any, exc: BaseException, keep_open: bool = True) -> None:
        """Record the error on the span (redacted); leave a record's span open for the decision."""
        from opentelemetry.trace import Status, StatusCode

        message = redacted(str(exc)[:REDACTION_INPUT_LIMIT], self._redact)[:ERROR_PREVIEW]
        stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        stack = redacted(stack[-REDACTION_INPUT_LIMIT:], self._redact)[-_TRACEBACK_LIMIT:]
        error_type = f"{type(exc).__module__}.{type(exc).__qualname__}"
        span.add_event(
            "exception",
            {
                "exception.type": error_type,
                "exception.message": message,
                "exception.stacktrace": stack,
            },
        )
        span.set_attribute("error.type", error_type)
        span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
        if keep_open:
            _failed_attempt.set(span)

    def _settle(self, event: str, attributes: dict[str, Any]) -> None:
        span = _failed_attempt.get()
        if span is None:  # a failure without a handler call (pull style, ack timeout)
            return
        _failed_attempt.set(None)
        span.add_event(event, attributes)
        span.end()
