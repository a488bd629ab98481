"""What every peer shares: where its installs live, and how one run's output is read.

Each peer runs in its own process (a JVM, or another venv's interpreter) and prints one JSON
line, ``{"records": N, "seconds": S, "every": K, "marks": [...]}``, timed like keyshared's own
``Tally``: ``seconds`` from the first handler start to the N-th finish (the whole run), and
``marks[i]`` the time of completion ``(i + 1) x K`` since that start, for the steady-state
figure (:mod:`keyshared.bench.steady`; ``every`` and ``marks`` may be absent, and then the run
has no steady figure). Reading that line is the one piece of logic the peers share, so it lives
here, pure and unit-tested.

Why a cache outside the repository (``$KEYSHARED_PEERS_CACHE``, else
``$XDG_CACHE_HOME/keyshared/peers``, else ``~/.cache/keyshared/peers``): the peers' venvs and
compiled classes are per machine, hundreds of MB in all, and every worktree shares them.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keyshared.bench.result import Measurement, timed
from keyshared.dev.runtime import user_cache_dir

__all__ = [
    "INSTALL_HINT",
    "PEERS_CACHE_ENV",
    "PeerRunError",
    "PeerTiming",
    "default_peers_cache",
    "parse_timing",
    "run_timed",
    "timing_line",
    "venv_python",
]

PEERS_CACHE_ENV = "KEYSHARED_PEERS_CACHE"
INSTALL_HINT = "keyshared bench --install-peers"


class PeerRunError(RuntimeError):
    """A peer's run failed or printed no result; the message names the peer and its stderr."""


@dataclass(frozen=True)
class PeerTiming:
    """One peer run: ``records`` handled in ``seconds`` (first start to last finish), and the
    time of every ``every``-th completion since the first start (``marks``)."""

    records: int
    seconds: float
    every: int = 1
    marks: tuple[float, ...] = ()

    def measurement(self, label: str, **extra: Any) -> Measurement:
        """This run as a measurement with both figures (whole run and steady state)."""
        return timed(label, self.records, self.seconds, self.marks, self.every, **extra)


def default_peers_cache() -> Path:
    """The folder holding the peers' venvs and compiled harness (see the module docstring)."""
    return user_cache_dir(PEERS_CACHE_ENV, "peers")


def venv_python(venv: Path) -> Path:
    """The interpreter of a POSIX venv."""
    return venv / "bin" / "python"


def timing_line(records: int, seconds: float, every: int, marks: list[float]) -> str:
    """The result line a run prints (what :func:`parse_timing` reads), marks to the microsecond."""
    rounded = [round(mark, 6) for mark in marks]
    return json.dumps({"records": records, "seconds": seconds, "every": every, "marks": rounded})


def parse_timing(peer: str, returncode: int, stdout: str, stderr: str) -> PeerTiming:
    """Read the last JSON line a peer printed; any failure names the peer and quotes stderr.

    :raises PeerRunError: non-zero exit, no JSON line, or a line without sane numbers.
    """
    tail = stderr.strip()[-2000:]
    lines = [line for line in stdout.splitlines() if line.lstrip().startswith("{")]
    if returncode != 0 or not lines:
        raise PeerRunError(f"{peer} run failed (exit {returncode}): {tail or 'no output'}")
    try:
        data = json.loads(lines[-1])
        records, seconds = int(data["records"]), float(data["seconds"])
        every = int(data.get("every", 1))
        marks = tuple(float(mark) for mark in data.get("marks", ()))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        quoted = _short(lines[-1])
        raise PeerRunError(f"{peer} printed an unreadable result {quoted}: {exc}") from exc
    if records <= 0 or seconds <= 0 or every < 1 or len(marks) * every > records:
        raise PeerRunError(f"{peer} printed an impossible result {_short(lines[-1])}")
    return PeerTiming(records, seconds, every, marks)


def _short(line: str) -> str:
    """A result line quoted in an error: its marks can run to a thousand numbers."""
    return repr(line if len(line) <= 300 else line[:300] + "...")


def run_timed(peer: str, command: list[str], timeout: float) -> PeerTiming:
    """Run a peer's command to the end and read its result (the peer's own timeout is shorter;
    ``timeout`` here only guards against a hung process)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PeerRunError(f"{peer} did not exit within {timeout:.0f} s") from exc
    except OSError as exc:
        raise PeerRunError(f"{peer} could not start {command[0]}: {exc}") from exc
    return parse_timing(peer, done.returncode, done.stdout, done.stderr)
