"""The chaos run's member processes (no server: the processes are stand-ins)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chaos import members as members_module
from tests.chaos.members import Members
from tests.chaos.plan import ChaosPlan


class _Proc:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.killed = False

    def kill(self) -> None:
        self.killed = True

    def wait(self, _timeout: float | None = None) -> int:
        return -9


def test_no_two_members_of_a_run_share_a_pid(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The judge names processes by pid, and the kernel reuses pids within a 30-minute run.
    pids = iter([100, 200, 100, 200, 300])
    started: list[_Proc] = []

    def start_consumer(*_args: Any, **_kwargs: Any) -> _Proc:
        started.append(_Proc(next(pids)))
        return started[-1]

    monkeypatch.setattr(members_module, "start_consumer", start_consumer)
    members = Members(ChaosPlan("partition"), "b:1", "z:1", "g", "t", tmp_path)
    first, second = members.start("M1"), members.start("M2")
    members.kill(first)
    third = members.start("M1")  # gets 100, then 200 (both taken): killed at once; then 300
    assert [p.pid for p in started] == [100, 200, 100, 200, 300]
    assert [p.killed for p in started[2:]] == [True, True, False]
    assert members.names_by_pid == {100: "M1", 200: "M2", 300: third}
    assert members.procs[third].pid == 300 and members.procs[second].pid == 200
