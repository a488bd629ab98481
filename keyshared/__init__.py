"""keyshared: process Kafka messages in parallel per key, keeping per-key order."""

from __future__ import annotations

__all__: list[str] = []
