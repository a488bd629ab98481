"""Errors raised by keyshared, each named for what went wrong."""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "KeySharedError",
    "UnreachableError",
]


class KeySharedError(Exception):
    """Base class of keyshared's own errors."""


class ConfigurationError(KeySharedError, ValueError):
    """An option is invalid; raised at construction, naming the option."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"invalid option {option!r}: {problem}")
        self.option = option


class UnreachableError(KeySharedError, ConnectionError):
    """A broker or ZooKeeper did not answer within the bounded startup time."""
