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


def main(bootstrap: str, group: str, path: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    while True:
        try:
            future = admin.describe_consumer_groups([group], request_timeout=2)[group]
            stable = future.result(timeout=3).state == ConsumerGroupState.STABLE
        except Exception:  # the broker may be restarting: not stable
            stable = False
        os.write(fd, f"{time.monotonic_ns()} {int(stable)}\n".encode())
        time.sleep(0.1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
