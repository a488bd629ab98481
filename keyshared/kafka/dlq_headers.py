"""The provenance headers every dead letter carries, and their bounds.

A dead letter keeps the original record byte for byte; these headers say where it came from and
why it failed, so an operator (or ``keyshared dlq replay``, or the Spark reprocessing job) can
act on it without the consumer's logs. Shared by the live DLQ writer, the exactly-once outputs
and the Spark job, so every dead letter reads the same.
"""

from __future__ import annotations

import time
from typing import Any

from keyshared.core.redaction import REDACTION_INPUT_LIMIT, Redactor, redacted

__all__ = ["MAX_ERROR_MESSAGE", "MAX_TRACEBACK", "DlqHeader", "provenance_headers"]

# A dead letter must fit the DLQ's max.message.bytes (1 MiB by default) next to the record it
# carries, so keyshared's own headers are bounded whatever the handler raised: the whole
# provenance block stays under 10 KiB.
MAX_ERROR_MESSAGE = 1_000  # bytes of the error message header (its head)
MAX_TRACEBACK = 8_000  # bytes of the traceback header (its tail: the raise site is last)


class DlqHeader:
    """Names of the provenance headers added to every dead letter (values are UTF-8 text;
    times are epoch milliseconds). A record that was dead-lettered before keeps its old
    ``keyshared.*`` headers; the new ones follow them, so the last occurrence is current."""

    SOURCE_TOPIC = "keyshared.source.topic"
    SOURCE_PARTITION = "keyshared.source.partition"
    SOURCE_OFFSET = "keyshared.source.offset"
    SOURCE_TIMESTAMP = "keyshared.source.timestamp"  # empty when the record had none
    GROUP = "keyshared.group"
    ATTEMPTS = "keyshared.attempts"
    REASON = "keyshared.reason"  # exhausted, not_retriable, do_not_retry, deserialization, parked
    ERROR_CLASS = "keyshared.error.class"  # module-qualified; empty for a parked key's tail
    ERROR_MESSAGE = "keyshared.error.message"
    TRACEBACK = "keyshared.error.traceback"
    FIRST_FAILURE = "keyshared.failure.first"
    LAST_FAILURE = "keyshared.failure.last"


def provenance_headers(
    msg: Any,
    group: str,
    attempts: int,
    error: BaseException | None,
    reason: str,
    traceback_text: str,
    first_failure: float,
    redact: Redactor | None = None,
) -> list[tuple[str, str | bytes | None]]:
    """The original headers of ``msg`` followed by the :class:`DlqHeader` provenance headers.

    The error message and traceback are redacted, then cut to :data:`MAX_ERROR_MESSAGE` and
    :data:`MAX_TRACEBACK` bytes; the original headers are the record's and stay as they are.
    """
    ts_type, ts = msg.timestamp()
    text = {
        DlqHeader.SOURCE_TOPIC: msg.topic(),
        DlqHeader.SOURCE_PARTITION: str(msg.partition()),
        DlqHeader.SOURCE_OFFSET: str(msg.offset()),
        DlqHeader.SOURCE_TIMESTAMP: str(ts) if ts_type else "",
        DlqHeader.GROUP: group,
        DlqHeader.ATTEMPTS: str(attempts),
        DlqHeader.REASON: reason,
        DlqHeader.ERROR_CLASS: _qualified_name(error),
        DlqHeader.FIRST_FAILURE: str(int(first_failure * 1000)),
        DlqHeader.LAST_FAILURE: str(int(time.time() * 1000)),
    }
    headers: list[tuple[str, str | bytes | None]] = list(msg.headers() or ())
    headers += [(name, value.encode()) for name, value in text.items()]
    message = redacted(_message(error)[:REDACTION_INPUT_LIMIT], redact)
    trace = redacted(traceback_text[-REDACTION_INPUT_LIMIT:], redact) if traceback_text else ""
    headers.append((DlqHeader.ERROR_MESSAGE, _bounded_head(message, MAX_ERROR_MESSAGE)))
    headers.append((DlqHeader.TRACEBACK, _bounded_tail(trace, MAX_TRACEBACK)))
    return headers


def _qualified_name(error: BaseException | None) -> str:
    if error is None:
        return ""
    kind = type(error)
    module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
    return module + kind.__qualname__


def _message(error: BaseException | None) -> str:
    if error is None:
        return ""
    return str(error) or repr(error)


def _bounded_head(text: str, limit: int) -> bytes:
    return text.encode()[:limit].decode(errors="ignore").encode()


def _bounded_tail(text: str, limit: int) -> bytes:
    data = text.encode()
    return data[-limit:].decode(errors="ignore").encode() if len(data) > limit else data
