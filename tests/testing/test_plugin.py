"""`keyshared.testing.plugin` in a user's own suite, against the session's servers (external).

The same suite runs against containers in `test_containers.py`, chosen by ``auto``.
"""

from __future__ import annotations

from pathlib import Path

from keyshared.dev import BOOTSTRAP_ENV, ZOOKEEPER_ENV
from keyshared.testing import BACKEND_ENV
from tests.testing.user_suite import run_user_suite


def test_a_users_handler_test_gets_the_cluster_from_the_plugin(
    kafka_bootstrap: str, zookeeper_hosts: str, tmp_path: Path
) -> None:
    env = {BOOTSTRAP_ENV: kafka_bootstrap, ZOOKEEPER_ENV: zookeeper_hosts, BACKEND_ENV: "auto"}
    result = run_user_suite(tmp_path, "external", env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout
