"""Read a consumer's ``/healthz`` and ``/readyz`` the way a Kubernetes probe does."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import keyshared

__all__ = ["probe"]


def probe(consumer: keyshared.KeySharedConsumer, path: str) -> tuple[int, dict[str, Any]]:
    """GET ``path`` (``/healthz`` or ``/readyz``) on the consumer's metrics endpoint."""
    url = consumer.metrics_url
    assert url is not None, "the consumer serves no metrics endpoint (metrics_port unset)"
    base = url.rsplit("/", 1)[0]
    try:
        with urllib.request.urlopen(base + path, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())
