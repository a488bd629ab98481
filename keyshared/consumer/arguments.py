"""Checks of ``KeySharedConsumer``'s arguments that need no broker: each fails at construction
with a :class:`ConfigurationError` naming the argument, never later inside ``run``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from keyshared.core.modes import Mode
from keyshared.errors import ConfigurationError
from keyshared.settings import ConsumerOptions

__all__ = ["check_arguments", "check_drain_timeout", "resolve_options", "topic_list"]


def check_arguments(options: ConsumerOptions, coordinator: Any, handler: Any) -> None:
    """The combinations of mode, coordinator and handler style that cannot work."""
    if options.mode is Mode.KEY_SHARED and coordinator is None:
        raise ConfigurationError(
            "coordinator",
            "key_shared mode needs a coordinator: pass "
            "coordinator=coordinator.ZooKeeperCoordinator('host:port')",
        )
    if coordinator is not None and not callable(getattr(coordinator, "range_leases", None)):
        raise ConfigurationError(
            "coordinator", f"expected a coordinator.ZooKeeperCoordinator, got {coordinator!r}"
        )
    if coordinator is not None and options.mode is Mode.EXCLUSIVE and options.transactional_id:
        raise ConfigurationError(
            "transactional_id",
            "exclusive mode with a coordinator uses one transactional.id for the group's "
            "active role (keyshared-<group>-active), shared by every member so that each new "
            "active member fences the last one at the broker; leave transactional_id unset",
        )
    if handler is not None and not callable(handler):
        raise ConfigurationError("handler", f"must be callable, got {handler!r}")
    if handler is None and options.batch_size is not None:
        raise ConfigurationError(
            "batch_size", "is for batch handlers; pull style (handler=None) takes one by one"
        )


def topic_list(topics: Iterable[str] | str) -> list[str]:
    """The topics as a list; one name is accepted as a string."""
    listed = [topics] if isinstance(topics, str) else list(topics)
    if not listed or not all(isinstance(t, str) and t for t in listed):
        raise ConfigurationError("topics", "must be a non-empty list of topic names")
    return listed


def resolve_options(options: ConsumerOptions | None, values: Mapping[str, Any]) -> ConsumerOptions:
    """``options=`` or keyword options (not both); an unknown keyword is named in the error."""
    if options is not None and values:
        raise ConfigurationError("options", "give either options= or keyword options, not both")
    if options is not None:
        return options
    try:
        return ConsumerOptions(**values)
    except TypeError as exc:
        raise ConfigurationError(
            str(exc).split("'")[-2] if "'" in str(exc) else "options",
            f"unknown option ({exc})",
        ) from None


def check_drain_timeout(options: ConsumerOptions, kafka_config: Mapping[str, Any]) -> None:
    """A revoke drains before the consumer polls again, so the drain must end well inside
    ``max.poll.interval.ms`` or the group would evict the member mid-drain."""
    poll_interval_ms = int(kafka_config.get("max.poll.interval.ms", 300_000))
    if options.drain_timeout * 1000 >= poll_interval_ms:
        raise ConfigurationError(
            "drain_timeout",
            f"{options.drain_timeout:g}s must be shorter than max.poll.interval.ms "
            f"({poll_interval_ms} ms): a revoke drains before the consumer polls again",
        )
