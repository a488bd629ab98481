"""An I/O-like handler for benchmark member processes: sleep ``$KS_BENCH_SLEEP_S`` seconds.

Run as ``keyshared run keyshared.bench.sleep_handler:handle ...``; nothing else, so a member's
rate is bounded by its workers and the sleep, as a network call would bound it.
"""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["handle"]

_SLEEP_S = float(os.environ.get("KS_BENCH_SLEEP_S", "0.01"))


def handle(record: Any) -> None:
    time.sleep(_SLEEP_S)
