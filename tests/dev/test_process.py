"""Recognising our own server processes, including in the window between fork and exec."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pytest

from keyshared.dev import process


@pytest.mark.integration  # starts a child process
@pytest.mark.skipif(shutil.which("sleep") is None, reason="needs /bin/sleep")
def test_a_child_not_yet_carrying_its_marker_is_still_running(tmp_path: Path) -> None:
    """The marker is not yet one of the child's arguments (as between fork and exec, which a
    loaded CI machine stretched past the first readiness check): our own live child is running
    all the same, and stops counting once it has exited."""
    marker = str(tmp_path / "server.properties")
    # Its /proc argv will not show the marker (it execs into a plain sleep), as a child's
    # does not before its exec: only what we launched says it is this server.
    script = "import os, time; time.sleep(0.05); os.execv('/bin/sleep', ['sleep', '30'])"
    pid = process.spawn([sys.executable, "-c", script, marker], tmp_path / "out", tmp_path)
    time.sleep(0.5)  # let it exec: from here on /proc no longer carries the marker
    try:
        assert process.is_running(pid, marker), "our own live child was taken for gone"
        other = str(tmp_path / "another-server.properties")
        assert not process.is_running(pid, other), "our child was taken for another server"
        assert process.stop(pid, marker, timeout=5.0)
        assert not process.is_running(pid, marker)
    finally:
        if process.is_running(pid, marker):
            process.stop(pid, marker, timeout=5.0, kill=True)


def test_a_foreign_pid_counts_only_with_its_marker(tmp_path: Path) -> None:
    import os

    assert not process.is_running(os.getpid(), str(tmp_path / "not-an-argument"))
