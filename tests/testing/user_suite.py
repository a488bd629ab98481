"""A user's own handler test, run the way a user runs it: a separate pytest in a fresh folder.

The folder has only a ``conftest.py`` that opts in to `keyshared.testing.plugin` and one test
that drives a `KeySharedConsumer` against the ``keyshared_cluster`` fixture. The caller's
environment chooses the backend; the test checks the one it was told to expect.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["run_user_suite"]

CONFTEST = 'pytest_plugins = ["keyshared.testing.plugin"]\n'

USER_TEST = """
import os
import threading

from confluent_kafka import Producer

import keyshared

RECORDS = 60


def test_handler_sees_every_record_in_key_order(keyshared_cluster, keyshared_topic):
    assert keyshared_cluster.backend == os.environ["EXPECTED_BACKEND"]
    topic = keyshared_topic(partitions=2)
    producer = Producer({"bootstrap.servers": keyshared_cluster.bootstrap_servers})
    for i in range(RECORDS):
        producer.produce(topic, key=f"k{i % 4}".encode(), value=str(i).encode())
    assert producer.flush(30) == 0
    seen, done = [], threading.Event()

    def handle(record):
        seen.append((record.key, int(record.value)))
        if len(seen) == RECORDS:
            done.set()

    config = {
        "bootstrap.servers": keyshared_cluster.bootstrap_servers,
        "group.id": topic,
        "auto.offset.reset": "earliest",
    }
    consumer = keyshared.KeySharedConsumer(config, [topic], handle, workers=4)
    runner = threading.Thread(target=consumer.run)
    runner.start()
    try:
        assert done.wait(60), f"only {len(seen)} of {RECORDS} records handled"
    finally:
        consumer.stop()
        runner.join(30)
    for key in {k for k, _ in seen}:
        values = [v for k, v in seen if k == key]
        assert values == sorted(values), f"key {key!r} out of order: {values}"
"""


def run_user_suite(
    folder: Path, expected_backend: str, env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """Write the user's suite into ``folder`` and run it with ``env`` added to ours."""
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_handler.py").write_text(USER_TEST)
    environment = {**os.environ, **env, "EXPECTED_BACKEND": expected_backend}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
