"""The ``stuck`` scenario's consumer: ``keyshared run`` in a child process, driven by events.

The child's handler (:mod:`keyshared.bench.stuck_handler`) prints JSON events on stdout; a
reader thread queues them, and the scenario waits on that queue for the event it needs. While
it waits it samples the child's RSS, a fallback for kernels that refuse to reset the peak
(``VmHWM``, read exactly otherwise; see :mod:`keyshared.bench.procfs`).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from keyshared.bench.cli_contender import cli_command
from keyshared.bench.contenders import BenchError
from keyshared.bench.procfs import read_memory, reset_peak

__all__ = ["StalledConsumer"]

_HANDLER = "keyshared.bench.stuck_handler:handle"
# The broker keeps a SIGKILLed member in the group until its session times out (45 s by
# default), and the restart cannot join before: the broker's minimum instead (6 s).
_FAST_EVICTION = ("-X", "session.timeout.ms=6000")
_SAMPLE_S = 0.25  # RSS sampling period while waiting for an event (fallback peak only)


class StalledConsumer:
    """``keyshared run`` with the stuck handler over ``topic``, started at construction.

    :param journal: file the handler appends ``partition offset`` to per finished record.
    :param stuck_key: the key whose handler stalls ``stall_s`` seconds after :meth:`go`.
    :param target: records of other keys; the child reports when all have finished.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        workers: int,
        journal: Path,
        stuck_key: bytes,
        stall_s: float,
        target: int,
    ) -> None:
        env = {
            **os.environ,
            "KS_STUCK_KEY": stuck_key.decode(),
            "KS_STUCK_S": repr(float(stall_s)),
            "KS_JOURNAL": str(journal),
            "KS_TARGET": str(target),
        }
        self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by kill())
        self.proc = subprocess.Popen(
            cli_command(bootstrap, topic, group, workers, _HANDLER, _FAST_EVICTION),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, name="bench-stuck-events", daemon=True).start()
        self.all_seconds: float | None = None
        self.peak_source = "VmHWM since the stall began"
        self._exact_peak = False
        self._sampled_peak = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.lstrip().startswith("{"):
                self._events.put(json.loads(line))
        self._events.put(None)

    def wait_for(self, event: str, timeout: float) -> dict[str, Any]:
        """The next ``event`` from the child (noting an ``all`` event on the way).

        :raises BenchError: the child exited, or ``timeout`` passed (with its stderr's tail).
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                item = self._events.get(timeout=_SAMPLE_S)
            except queue.Empty:
                self._sample()
                if time.monotonic() > deadline:
                    what = f"no {event!r} within {timeout:.0f} s"
                    raise BenchError(self._failure(what)) from None
                continue
            if item is None:
                raise BenchError(self._failure(f"exited before {event!r}"))
            if item.get("event") == "all":
                self.all_seconds = float(item["seconds"])
            if item.get("event") == event:
                return item

    def begin_memory(self) -> int:
        """The child's RSS now, the baseline; from here its peak is tracked."""
        rss = read_memory(self.proc.pid).rss
        self._exact_peak = reset_peak(self.proc.pid)
        if not self._exact_peak:
            self.peak_source = "RSS sampled every 0.25 s (the kernel refused to reset VmHWM)"
        self._sampled_peak = rss
        return rss

    def go(self) -> None:
        """Start the stall's clock (the other records are in the topic now)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def peak_memory(self) -> int:
        """The child's peak RSS since :meth:`begin_memory`."""
        memory = read_memory(self.proc.pid)
        self._sampled_peak = max(self._sampled_peak, memory.rss)
        return memory.peak if self._exact_peak else self._sampled_peak

    def _sample(self) -> None:
        with contextlib.suppress(OSError):  # exited: the next queue item says so
            self._sampled_peak = max(self._sampled_peak, read_memory(self.proc.pid).rss)

    def kill(self) -> None:
        """SIGKILL: no drain, no final commit, as a crash."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self._stderr.close()

    def _failure(self, what: str) -> str:
        self._stderr.seek(0)
        tail = self._stderr.read()[-2000:].strip()
        return f"stuck: keyshared run {what} (exit {self.proc.poll()}): {tail or 'no stderr'}"
