"""``python -m tests.chaos.group_state_probe BOOTSTRAP GROUP FILE``: append ``<monotonic ns>
<0|1>`` to FILE every 100 ms, 1 when the group coordinator says the group is Stable.

A process of its own because an admin request pending across a broker SIGKILL can trip an
assertion inside librdkafka (``rd_kafka_enq_once_del_source_return``) that aborts the whole
process; the harness restarts the probe when it dies, and must not die with it.
"""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

FRESH_CLIENT_AFTER = 2
"""Failed requests in a row after which the admin client is replaced. After a single broker's
SIGKILL and restart one client went on failing for 311 s (the 30-minute partition-lease run of
2026-11-26, 11:43) while new clients were answered at once: its samples all said "not stable",
which excuses more redos than the group's real state would."""


def _client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})


def main(bootstrap: str, group: str, path: str) -> None:
    admin = _client(bootstrap)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    failures = 0
    while True:
        try:
            future = admin.describe_consumer_groups([group], request_timeout=2)[group]
            stable = future.result(timeout=3).state == ConsumerGroupState.STABLE
            failures = 0
        except Exception:  # the broker may be restarting: not stable
            stable = False
            failures += 1
            if failures >= FRESH_CLIENT_AFTER:
                admin, failures = _client(bootstrap), 0
        os.write(fd, f"{time.monotonic_ns()} {int(stable)}\n".encode())
        time.sleep(0.1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
