"""Start, recognise and stop the server JVMs.

The servers outlive the command that starts them (`keyshared dev up` returns while Kafka keeps
running), so a later `keyshared dev down` only has a pid from the state file. A pid alone is not
proof: after a reboot it may belong to anything. Each server is therefore launched with a
*marker* on its command line (the absolute path of its config file inside the runtime folder),
and a pid only counts as ours while that marker is still one of its arguments. This is what
lets `down` stop exactly the processes it started and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["find_processes", "is_running", "spawn", "stop"]

# Children started by this Python process: polled so that an exited server is reaped (a zombie
# still answers `kill(pid, 0)` and would look alive).
_children: dict[int, subprocess.Popen[bytes]] = {}
_launched: dict[int, tuple[str, ...]] = {}  # the argv each child was started with
_children_lock = threading.Lock()
_POLL_INTERVAL_S = 0.05


def spawn(command: Sequence[str], output: Path, cwd: Path) -> int:
    """Start `command` detached from this process and its terminal; return its pid.

    A new session keeps Ctrl-C in the shell that ran `keyshared dev up` from reaching the
    servers. stdout/stderr go to `output` (appended), where JVM-level failures land (bad flags,
    out of memory) that never reach the server's own log.
    """
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("ab") as out:
        proc = subprocess.Popen(
            list(command),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    with _children_lock:
        _children[proc.pid] = proc
        _launched[proc.pid] = tuple(str(part) for part in command)
    return proc.pid


def is_running(pid: int, marker: str) -> bool:
    """Whether `pid` is alive (not a zombie) and `marker` is one of its arguments.

    A server this process started is judged by its `Popen` instead: between fork and exec its
    argv is still this Python's, without the marker, and a loaded machine can stretch that
    window past the first readiness check, which then reported a healthy server as "exited
    during startup" (seen in CI). While we hold its `Popen` unreaped, the pid cannot be reused.
    """
    with _children_lock:
        child = _children.get(pid)
        if child is not None:
            if child.poll() is None:
                # What we launched, not what /proc shows yet: the marker is in our own argv.
                return marker in _launched.get(pid, ())
            del _children[pid]
            _launched.pop(pid, None)
            return False
    args = _command_line(pid)
    return args is not None and marker in args


def stop(pid: int, marker: str, timeout: float, *, kill: bool = False) -> bool:
    """Stop our process `pid`: SIGTERM, then SIGKILL if it is still alive after `timeout` s.

    With `kill=True` it sends SIGKILL at once (a crash, for tests of recovery). Returns whether
    a process was stopped (False: it was not running, or the pid is no longer ours).
    """
    if not is_running(pid, marker):
        return False
    first = signal.SIGKILL if kill else signal.SIGTERM
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, first)
    if _wait_gone(pid, marker, timeout):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _wait_gone(pid, marker, 10.0)  # SIGKILL cannot be refused; this only waits for the exit.
    return True


def find_processes(marker: str) -> list[int]:
    """Every live process that has `marker` among its arguments (Linux /proc only).

    The fallback for a lost or corrupt state file: the marker still identifies our servers.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    found = []
    for entry in proc.iterdir():
        if entry.name.isdigit() and is_running(int(entry.name), marker):
            found.append(int(entry.name))
    return sorted(found)


def _wait_gone(pid: int, marker: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_running(pid, marker):
            return True
        time.sleep(_POLL_INTERVAL_S)
    return not is_running(pid, marker)


def _command_line(pid: int) -> list[str] | None:
    """The argv of a live, non-zombie `pid`, or None."""
    proc_dir = Path("/proc") / str(pid)
    if Path("/proc/self").exists():
        try:
            stat = (proc_dir / "stat").read_text()
            raw = (proc_dir / "cmdline").read_bytes()
        except OSError:
            return None
        # The state letter follows the parenthesised command name, which may contain spaces.
        if stat.rpartition(")")[2].split()[:1] in (["Z"], ["X"]):
            return None
        return [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    try:
        result = subprocess.run(
            ["ps", "-o", "stat=,command=", "-p", str(pid)],
            capture_output=True, text=True, check=False, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = result.stdout.strip()
    if result.returncode != 0 or not line or line.startswith("Z"):
        return None
    return line.split()[1:]
