"""keyshared through its CLI as a contender: ``keyshared run`` in a subprocess, same handler.

The process runs :mod:`keyshared.bench.cli_handler` over the scenario's topic with a fresh group
from the beginning, prints one timing line when it has finished ``records`` records (timed like
every other contender, first handler start to the N-th finish), and is then stopped with
SIGTERM, as an operator would stop it (drain, final commit). A process that never prints is
killed at the timeout, which ends the wait: no polling.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from keyshared.bench.contenders import BenchError
from keyshared.bench.peers.common import PeerRunError, parse_timing
from keyshared.bench.result import Measurement

__all__ = ["cli_command", "run_keyshared_cli"]

_HANDLER = "keyshared.bench.cli_handler:handle"


def cli_command(
    bootstrap: str,
    topic: str,
    group: str,
    workers: int,
    handler: str = _HANDLER,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``keyshared run`` command line of the CLI contender (the same interpreter as the
    bench, so the same keyshared is measured), with its defaults otherwise; ``extra`` is
    appended (more options)."""
    return [
        sys.executable,
        "-c",
        "from keyshared.cli import main; main()",
        "run",
        handler,
        "-b",
        bootstrap,
        "-g",
        group,
        "-t",
        topic,
        "--workers",
        str(workers),
        "--poison",
        "drop",  # the handler never fails; no DLQ producer to start
        "--log-level",
        "WARNING",
        "-X",
        "auto.offset.reset=earliest",
        *extra,
    ]


def run_keyshared_cli(
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    handler_s: float,
    workers: int,
    *,
    work_file: Path | None = None,
    timeout: float = 600.0,
) -> Measurement:
    """Time ``keyshared run`` over ``records`` records of ``topic`` (see the module docstring).

    :param work_file: run the ``io_work`` handler appending to this file; None: sleep only.
    :raises BenchError: the process failed, or did not finish ``records`` within ``timeout``.
    """
    env = {
        **os.environ,
        "KS_BENCH_SLEEP_S": repr(float(handler_s)),
        "KS_BENCH_TARGET": str(records),
    }
    env.pop("KS_BENCH_WORK_FILE", None)
    if work_file is not None:
        env["KS_BENCH_WORK_FILE"] = str(work_file)
    label = f"keyshared run, CLI subprocess ({workers} workers)"
    with tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen(
            cli_command(bootstrap, topic, group, workers),
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the timing line, or EOF when it died or was killed
            timer.cancel()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stderr.seek(0)
        errors = stderr.read()
    try:
        timing = parse_timing("keyshared run", 0 if line else proc.returncode or 1, line, errors)
    except PeerRunError as exc:
        raise BenchError(f"{label}: no result within {timeout:.0f} s: {exc}") from exc
    return timing.measurement(label, workers=workers)
