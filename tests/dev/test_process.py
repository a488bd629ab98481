"""Recognising our own server processes, including in the window between fork and exec."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from keyshared.dev import process

pytestmark = pytest.mark.unit


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_a_child_not_yet_carrying_its_marker_is_still_running(tmp_path: Path) -> None:
    """The marker is not yet one of the child's arguments (as between fork and exec, which a
    loaded CI machine stretched past the first readiness check): our own live child is running
    all the same, and stops counting once it has exited."""
    marker = str(tmp_path / "server.properties")
    pid = process.spawn(
        ["sh", "-c", f"sleep 1; exec sleep 30 {marker}"], tmp_path / "out", tmp_path
    )
    try:
        assert process.is_running(pid, marker), "our own live child was taken for gone"
        assert process.stop(pid, marker, timeout=5.0)
        assert not process.is_running(pid, marker)
    finally:
        if process.is_running(pid, marker):
            process.stop(pid, marker, timeout=5.0, kill=True)


def test_a_foreign_pid_counts_only_with_its_marker(tmp_path: Path) -> None:
    import os

    assert not process.is_running(os.getpid(), str(tmp_path / "not-an-argument"))
