"""Helpers for the operator-command tests: a real consumer on a thread, producers, waits.

The committed state that ``status`` and ``verify`` read is always made by the real
``KeySharedConsumer`` against the real broker (or, for the cases a consumer cannot produce on
purpose, such as a cursor left on a transaction marker, by a plain commit).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from click import Command
from click.testing import CliRunner, Result
from confluent_kafka.admin import AdminClient

from keyshared.dev.topics import GroupFactory, create_topic, delete_topics
from keyshared.kafka.keystate import topic_for
from keyshared.ops import GroupReader
from tests.kafka.support.inprocess import StartConsumer, consumers_for

WAIT = 60.0


@pytest.fixture
def start(kafka_bootstrap: str, new_topic: object) -> Iterator[StartConsumer]:
    """Consumers stopped after the test, before ``new_topic`` deletes their topics."""
    yield from consumers_for(kafka_bootstrap, WAIT)


@pytest.fixture
def group(new_group: GroupFactory, kafka_bootstrap: str) -> Iterator[str]:
    """A fresh group; its key-state topic (if a test made one) is deleted afterwards."""
    name = new_group("ops")
    yield name
    delete_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), [topic_for(name)])


@pytest.fixture
def dlq_for(kafka_bootstrap: str) -> Iterator[Callable[[str], str]]:
    """``dlq_for(topic)`` creates ``<topic>.dlq`` (one partition) and returns its name."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    made: list[str] = []

    def make(topic: str) -> str:
        name = f"{topic}.dlq"
        create_topic(admin, name, 1)
        made.append(name)
        return name

    yield make
    delete_topics(admin, made)


def committed_to_end(bootstrap: str, group: str, topic: str, partitions: int) -> bool:
    """Whether ``group``'s committed offset is at the high watermark on every partition."""
    reader = GroupReader({"bootstrap.servers": bootstrap}, 10.0)
    committed = reader.committed(group)
    marks = reader.watermarks((topic, p) for p in range(partitions))
    return all(committed.get(tp, (None, None))[0] == high for tp, (_, high) in marks.items())


def invoke(command: Command, args: Sequence[str], bootstrap: str) -> Result:
    """Run a command the way a shell would, with the broker taken from the environment."""
    runner = CliRunner()
    return runner.invoke(
        command, list(args), env={"KEYSHARED_BOOTSTRAP_SERVERS": bootstrap}, catch_exceptions=False
    )


def invoke_json(command: Command, args: Sequence[str], bootstrap: str) -> tuple[int, Any]:
    """The exit code and parsed ``--json`` output."""
    result = invoke(command, [*args, "--json"], bootstrap)
    assert result.stdout.strip(), f"no output (exit {result.exit_code}): {result.output}"
    return result.exit_code, json.loads(result.stdout)
