"""``keyshared run --tracing --value-deserializer MODULE:OBJ`` (real broker, a real subprocess).

The handler module configures the OpenTelemetry SDK as an application would and names a
confluent-kafka ``JSONDeserializer``; the handler prints what it saw, one JSON line per record,
which the test reads from the process's stdout as it comes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from confluent_kafka import Producer

from keyshared.dev.topics import TopicFactory, unique_name
from tests.kafka.support.journal import REPO_ROOT, keyshared_command, terminate

HANDLER_MODULE = """
import json
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

trace.set_tracer_provider(TracerProvider())
orders = JSONDeserializer('{"type": "object", "required": ["id"]}')


def handle(record):
    context = trace.get_current_span().get_span_context()
    print(json.dumps({"value": record.value, "trace": format(context.trace_id, "032x")}),
          flush=True)
"""
TRACES = [f"{n:032x}" for n in (0xA1, 0xB2)]


def test_run_traces_each_call_under_the_records_traceparent_and_deserializes_with_confluents(
    kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    (tmp_path / "traced_orders.py").write_text(HANDLER_MODULE)
    topic = new_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n, trace_id in enumerate(TRACES):
        traceparent = f"00-{trace_id}-{n + 1:016x}-01".encode()
        value = b"\x00\x00\x00\x00\x01" + json.dumps({"id": f"o-{n}"}).encode()
        producer.produce(topic, key=b"k", value=value, headers=[("traceparent", traceparent)])
    assert producer.flush(30) == 0
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [*keyshared_command(), "run", "traced_orders:handle", "-b", kafka_bootstrap,
         "-g", unique_name("cli-traced"), "-t", topic, "--tracing",
         "--value-deserializer", "traced_orders:orders"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        seen = [json.loads(proc.stdout.readline() or "null") for _ in TRACES]
    finally:
        code = terminate(proc)  # type: ignore[arg-type]
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    assert seen == [{"value": {"id": f"o-{n}"}, "trace": t} for n, t in enumerate(TRACES)]
