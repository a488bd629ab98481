"""What leaves the process stays small and redacted; endpoints bind loopback (issue 14, item 3).

No broker here: the DLQ headers are built from a stand-in message, the endpoint is the metrics
server itself. The end-to-end proof (a real consumer's logs and dead letters) is in
``test_redaction_end_to_end.py``.
"""

from __future__ import annotations

import re
import socket
import urllib.request
from typing import Any

import pytest

import keyshared
from keyshared.consumer.hotkeys_view import render_key
from keyshared.core.redaction import REDACTION_FAILED, shown_error, shown_key
from keyshared.kafka.dlq import MAX_ERROR_MESSAGE, MAX_TRACEBACK, DlqHeader, provenance_headers
from keyshared.metrics import start_metrics_server
from keyshared.runtime.execution import _bounded_traceback

CARD = "4111111111111111"


def mask_cards(text: str) -> str:
    return re.sub(r"\d{13,19}", "<card>", text)


class _Message:
    """The confluent_kafka.Message methods ``provenance_headers`` reads."""

    def __init__(self, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> None:
        self._key, self._value, self._headers = key, value, headers

    def topic(self) -> str:
        return "orders"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 42

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers


def _raise_deep(depth: int, message: str) -> None:
    if depth == 0:
        raise ValueError(message)
    _raise_deep(depth - 1, message)


def _caught(message: str, depth: int = 0) -> BaseException:
    try:
        _raise_deep(depth, message)
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


def _headers(error: BaseException, redact: Any = None) -> dict[str, bytes]:
    msg = _Message(b"k", CARD.encode(), [("trace-id", CARD.encode())])
    headers = provenance_headers(
        msg, "g", 3, error, "exhausted", _bounded_traceback(error), 0.0, redact
    )
    return {name: value for name, value in headers if isinstance(value, bytes)}


def test_dlq_error_headers_are_bounded_whatever_the_handler_raised() -> None:
    """A 10 MiB error message and a 900-frame traceback still give small headers: the
    message's head (1,000 bytes), the traceback's tail (8,000 bytes) with the raise site."""
    huge = _caught("x" * (10 * 1024 * 1024) + " the end", depth=900)
    headers = _headers(huge)
    assert len(headers[DlqHeader.ERROR_MESSAGE]) == MAX_ERROR_MESSAGE
    trace = headers[DlqHeader.TRACEBACK]
    assert len(trace) == MAX_TRACEBACK
    assert trace.endswith(b" the end\n"), "the tail (raise site and message) is kept"
    provenance = sum(len(v) for k, v in headers.items() if k.startswith("keyshared."))
    assert provenance < 10 * 1024


def test_multibyte_text_is_cut_on_a_character_boundary() -> None:
    headers = _headers(_caught("\u2603" * 5000))
    headers[DlqHeader.ERROR_MESSAGE].decode()  # valid UTF-8 after the cut
    headers[DlqHeader.TRACEBACK].decode()
    assert len(headers[DlqHeader.ERROR_MESSAGE]) <= MAX_ERROR_MESSAGE


def test_redaction_reaches_dlq_error_headers_but_not_the_record() -> None:
    error = _caught(f"card {CARD} declined")
    headers = _headers(error, mask_cards)
    assert CARD.encode() not in headers[DlqHeader.ERROR_MESSAGE]
    assert CARD.encode() not in headers[DlqHeader.TRACEBACK]
    assert b"card <card> declined" in headers[DlqHeader.ERROR_MESSAGE]
    assert b"<card>" in headers[DlqHeader.TRACEBACK]
    assert headers["trace-id"] == CARD.encode(), "the record's own headers are kept as they are"
    unredacted = _headers(error)
    assert CARD.encode() in unredacted[DlqHeader.ERROR_MESSAGE], "no hook: nothing changes"


def test_a_failing_hook_fails_closed() -> None:
    def broken(text: str) -> str:
        raise RuntimeError("bug in the hook")

    headers = _headers(_caught(f"card {CARD}"), broken)
    assert headers[DlqHeader.ERROR_MESSAGE] == REDACTION_FAILED.encode()
    assert headers[DlqHeader.TRACEBACK] == REDACTION_FAILED.encode()
    assert shown_key(CARD.encode(), broken) == REDACTION_FAILED
    assert shown_key(b"k", lambda text: None) == REDACTION_FAILED  # type: ignore[arg-type,return-value]


def test_keys_and_errors_in_log_lines_are_bounded_and_redacted() -> None:
    assert shown_key(f"card-{CARD}".encode(), mask_cards) == "b'card-<card>'"
    big = shown_key(b"k" * (1024 * 1024), None)
    assert len(big) < 100 and big.endswith("...'")
    assert shown_key(None, None) == "None"
    error = shown_error(ValueError("v" * 100_000 + CARD), mask_cards)
    assert len(error) <= 500 and CARD not in error
    assert render_key(CARD.encode(), mask_cards) == "<card>", "the /hotkeys view too"


def test_redact_must_be_callable() -> None:
    with pytest.raises(keyshared.ConfigurationError) as caught:
        keyshared.ConsumerOptions(redact="mask")  # type: ignore[arg-type]
    assert caught.value.option == "redact"


# -- endpoints bind loopback unless told otherwise ------------------------------------------


def _non_loopback_address() -> str | None:
    """An address of this machine that is not loopback (found without sending anything)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: routing only, no packet leaves
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") else address


def test_metrics_and_hotkeys_endpoints_bind_loopback_by_default() -> None:
    assert keyshared.ConsumerOptions().metrics_host == "127.0.0.1"
    with start_metrics_server(0, hotkeys=lambda: {"partitions": []}) as server:
        assert server._server.server_address[0] == "127.0.0.1"
        base = f"http://127.0.0.1:{server.port}"
        assert urllib.request.urlopen(base + "/hotkeys", timeout=5).status == 200
        other = _non_loopback_address()
        if other is not None:  # a machine with a network interface: it must not answer there
            with pytest.raises(OSError):
                socket.create_connection((other, server.port), timeout=2).close()
