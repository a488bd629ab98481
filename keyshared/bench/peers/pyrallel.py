"""pyrallel-consumer as a peer: a Python library with the same promise (per-key order, parallel).

It runs in a subprocess (``pyrallel_worker.py``) under its own venv's interpreter, like
quixstreams, because its pins (pydantic-settings, msgpack, ...) are not keyshared's and it
declares Python >= 3.12: it imports and runs on 3.11 when installed with
``pip install --ignore-requires-python``, which ``keyshared bench --install-peers`` does.

Two runs per scenario, both with ``OrderingMode.KEY_HASH`` and keyshared's concurrency:
``async`` (an ``async def`` handler that awaits ``asyncio.sleep``; concurrency is
``max_in_flight``) and ``process`` (a sync handler that ``time.sleep``\\ s in ``concurrency``
worker processes). pyrallel has no thread mode: its sync handlers run in processes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from keyshared.bench.peers.common import (
    INSTALL_HINT,
    PeerTiming,
    default_peers_cache,
    run_timed,
    venv_python,
)

__all__ = [
    "PYRALLEL_MODES",
    "PYRALLEL_VERSION",
    "default_pyrallel_python",
    "pyrallel_available",
    "run_pyrallel",
    "skip_note",
    "worker_command",
]

PYRALLEL_VERSION = "1.0.0"
PYRALLEL_MODES = ("async", "process")
_WORKER = Path(__file__).with_name("pyrallel_worker.py")


def default_pyrallel_python(peers_cache: Path | None = None) -> Path:
    """The interpreter of the venv ``--install-peers`` makes for pyrallel-consumer."""
    return venv_python((peers_cache or default_peers_cache()) / "pyrallel-venv")


def pyrallel_available(python: str | Path | None) -> str | None:
    """The pyrallel-consumer version importable by ``python`` (default: the cached venv's),
    or None when that interpreter is missing or cannot import it."""
    interpreter = str(python or default_pyrallel_python())
    probe = [
        interpreter,
        "-W",
        "ignore",
        "-c",
        "import importlib.metadata as m, pyrallel_consumer; print(m.version('pyrallel-consumer'))",
    ]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def worker_command(
    python: str | Path,
    mode: str,
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    handler_s: float,
    concurrency: int,
    timeout: float,
) -> list[str]:
    """The command line of one timed pyrallel run (see ``pyrallel_worker.py``)."""
    if mode not in PYRALLEL_MODES:
        raise ValueError(f"pyrallel mode must be one of {', '.join(PYRALLEL_MODES)}, got {mode!r}")
    if records < 1 or concurrency < 1 or handler_s < 0:
        raise ValueError(
            f"pyrallel run needs records >= 1, concurrency >= 1 and handler_s >= 0, "
            f"got records={records}, concurrency={concurrency}, handler_s={handler_s}"
        )
    return [
        str(python),
        "-W",
        "ignore",
        str(_WORKER),
        mode,
        bootstrap,
        topic,
        group,
        str(records),
        repr(float(handler_s)),
        str(concurrency),
        str(timeout),
    ]


def run_pyrallel(
    python: str | Path | None,
    mode: str,
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    handler_s: float,
    concurrency: int,
    timeout: float = 600.0,
) -> PeerTiming:
    """Time pyrallel-consumer in ``mode`` over ``records`` records of ``topic``."""
    command = worker_command(
        python or default_pyrallel_python(),
        mode,
        bootstrap,
        topic,
        group,
        records,
        handler_s,
        concurrency,
        timeout,
    )
    return run_timed(f"pyrallel-consumer ({mode})", command, timeout + 60)


def skip_note(python: str | Path | None) -> str:
    """What a result says when pyrallel is not importable: exactly how to install it."""
    where = python or default_pyrallel_python()
    return (
        f"pyrallel-consumer not importable by {where}: skipped; run `{INSTALL_HINT}`, or "
        "`python3 -m venv VENV && VENV/bin/pip install "
        f"--ignore-requires-python pyrallel-consumer=={PYRALLEL_VERSION}` and pass "
        "--pyrallel-python VENV/bin/python"
    )
