"""What keyshared may show of a record or a handler's error outside the process, and how big.

Keys, error messages and tracebacks leave the process in log lines, in the error headers of
dead letters, in the key-state topic (why a key is blocked) and in the ``/hotkeys`` view. They
can carry personal or secret data (an e-mail address as a key, a card number quoted by a
validation error), and they can be huge (a 1 MiB key, an error quoting a 10 MiB payload). So
every such text goes through one place: it is cut to a bounded size, then handed to the user's
redaction hook (``ConsumerOptions.redact``), which returns what may be shown.

The hook fails closed: if it raises, :data:`REDACTION_FAILED` is shown instead of the text,
never the raw text. The record itself (a dead letter's key, value and original headers) is
never redacted: a DLQ must hold the record byte for byte so a replay can restore it.

Example::

    >>> import re
    >>> mask = lambda text: re.sub(r"\\d{12,19}", "<card>", text)
    >>> shown_error(ValueError("card 4111111111111111 declined"), mask)
    "ValueError('card <card> declined')"
    >>> shown_key(b"alice@example.com", lambda text: "<key>")
    '<key>'
    >>> shown_key(b"k" * 1000, None)[-6:]
    "kk...'"
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "ERROR_PREVIEW",
    "KEY_PREVIEW",
    "REDACTION_FAILED",
    "REDACTION_INPUT_LIMIT",
    "Redactor",
    "redacted",
    "shown_error",
    "shown_key",
]

Redactor = Callable[[str], str]

REDACTION_FAILED = "<redaction failed>"
# Log lines show this many bytes of a key (and its repr adds escapes): enough to recognise it.
KEY_PREVIEW = 80
# Characters of an error's repr in a log line or a blocked key's reason.
ERROR_PREVIEW = 500
# The hook never sees more than this many characters: a regex over an error that quotes a
# 10 MiB payload must not stall a worker. Callers then cut the result to their own, smaller
# bound, so a token split at this cut is always cut away again.
REDACTION_INPUT_LIMIT = 64 * 1024


def redacted(text: str, redact: Redactor | None) -> str:
    """``text`` after the user's hook (identity without one); :data:`REDACTION_FAILED` if the
    hook raises or returns something that is not a string."""
    if redact is None:
        return text
    try:
        result = redact(text)
    except Exception:
        return REDACTION_FAILED
    return result if isinstance(result, str) else REDACTION_FAILED


def shown_key(key: bytes | None, redact: Redactor | None) -> str:
    """A key as a log line shows it: the repr of its first :data:`KEY_PREVIEW` bytes, redacted."""
    if key is None:
        return redacted("None", redact)
    text = repr(key[:KEY_PREVIEW])
    if len(key) > KEY_PREVIEW:
        text = f"{text[:-1]}...{text[-1]}"  # b'abc...' keeps its closing quote
    return redacted(text, redact)


def shown_error(error: BaseException | None, redact: Redactor | None) -> str:
    """An error as a log line shows it: its repr, redacted, at most :data:`ERROR_PREVIEW` chars."""
    if error is None:
        return ""
    text = redacted(repr(error)[:REDACTION_INPUT_LIMIT], redact)
    return text if len(text) <= ERROR_PREVIEW else text[: ERROR_PREVIEW - 3] + "..."
