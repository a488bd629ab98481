"""Kafka cluster ids that the storage tool's argument parser accepts."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator

import pytest

from keyshared.dev import kafka

# 0xF8.. encodes to a leading "-" in URL-safe base64; 0x00.. to a leading "A".
_DASH_FIRST = uuid.UUID(bytes=b"\xf8" + bytes(15))
_PLAIN = uuid.UUID(bytes=bytes(16))


def test_an_id_starting_with_a_dash_is_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    draws: Iterator[uuid.UUID] = iter([_DASH_FIRST, _DASH_FIRST, _PLAIN])
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: next(draws))
    assert base64.urlsafe_b64encode(_DASH_FIRST.bytes).decode().startswith("-")

    cluster_id = kafka.new_cluster_id()

    assert cluster_id == base64.urlsafe_b64encode(_PLAIN.bytes).decode().rstrip("=")


def test_ids_are_22_url_safe_characters_without_a_leading_dash() -> None:
    for _ in range(2000):
        cluster_id = kafka.new_cluster_id()
        assert len(cluster_id) == 22
        assert not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
