"""quixstreams as a contender: the well-known Python Kafka streaming library on the same topic.

quixstreams processes each partition's records one after another (like a plain consumer), which
is the comparison users ask for. It runs in a subprocess (see ``quix_worker.py``) under the
interpreter given by ``--quix-python`` because its ``confluent-kafka`` pin conflicts with
keyshared's; when that interpreter cannot import it, the contender is skipped with a note.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from keyshared.bench.peers.common import parse_timing
from keyshared.bench.result import Measurement

__all__ = ["quix_available", "run_quixstreams"]

_WORKER = Path(__file__).with_name("quix_worker.py")


def quix_available(python: str | None) -> str | None:
    """The quixstreams version importable by ``python`` (default: this interpreter), or None."""
    probe = [
        python or sys.executable,
        "-W",
        "ignore",
        "-c",
        "import quixstreams as q; print(q.__version__)",
    ]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def run_quixstreams(
    python: str | None,
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    handler_s: float,
    version: str,
    timeout: float = 600.0,
) -> Measurement:
    """Time quixstreams over ``records`` records (first handler start to last finish, with
    completion marks for the steady-state figure).

    :raises PeerRunError: the run failed or printed no readable result.
    """
    command = [
        python or sys.executable,
        "-W",
        "ignore",
        str(_WORKER),
        bootstrap,
        topic,
        group,
        str(records),
        str(handler_s),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    timing = parse_timing("quixstreams", done.returncode, done.stdout, done.stderr)
    return timing.measurement(f"quixstreams {version} (per-partition serial)", version=version)
