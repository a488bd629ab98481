"""The tracing and Schema Registry examples run as a user would run them, on the real broker."""

from __future__ import annotations

import re

from keyshared.dev.topics import unique_name
from tests.examples.test_examples import _run


def test_traced_consumer_puts_every_attempt_in_its_producers_trace(kafka_bootstrap: str) -> None:
    done = _run("traced_consumer.py", kafka_bootstrap, "--payments", "40",
                "--topic", unique_name("ex-traced"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    line = done.stdout.strip().splitlines()[-1]
    assert "39/39 payments charged; 42 process spans, 42 in their producer's trace" in line
    assert "42 charge spans under them" in line
    assert "payment-13: 3 attempts (retry, retry, dead_letter)" in line
    assert re.search(r"keeps the traceparent of trace [0-9a-f]{32}: True", line), line


def test_avro_schema_registry_example_decodes_orders_and_dead_letters_the_undecodable(
    kafka_bootstrap: str,
) -> None:
    done = _run("avro_schema_registry.py", kafka_bootstrap, "--orders", "200",
                "--topic", unique_name("ex-avro"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    line = done.stdout.strip().splitlines()[-1]
    assert "200/200 Avro orders of 50 customers decoded" in line
    assert "out-of-order 0" in line
    assert "reason deserialization, attempts 1" in line
