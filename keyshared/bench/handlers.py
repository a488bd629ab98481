"""The handlers the ``io`` scenarios race, shared by the in-process and the CLI contenders.

Why a module of its own: the CLI contender runs ``keyshared run`` in a subprocess, which imports
its handler by name; importing a scenario module there would register the scenario for nothing.

- :func:`sleeper`: the I/O wait alone (``io``): sleep ``L``.
- :class:`WorkHandler`: what real handlers do around the wait (``io_work``): parse the JSON
  value, sleep ``L``, append one line to a file with one ``os.write`` on an ``O_APPEND``
  descriptor, which the kernel appends atomically, so the threads share no Python-level lock.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["WorkHandler", "sleeper"]


def sleeper(seconds: float) -> Callable[[], None]:
    """A call that sleeps ``seconds`` (or does nothing when it is 0)."""
    if seconds <= 0:
        return lambda: None
    return lambda: time.sleep(seconds)


class WorkHandler:
    """Parse the JSON value, wait ``seconds``, append one line to ``path``.

    :param path: the file every call appends a line to.
    :param seconds: the simulated I/O wait.
    """

    def __init__(self, path: Path, seconds: float) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._seconds = seconds

    def __call__(self, key: bytes | None, value: bytes) -> None:
        document = json.loads(value)
        time.sleep(self._seconds)
        os.write(self._fd, b"%s\t%d\n" % (key or b"", document["n"]))

    def close(self) -> None:
        os.close(self._fd)

    def measured(self, samples: int = 200) -> float:
        """Mean wall time of one call here and now (what L really is for this handler)."""
        value = b'{"n":1,"pad":"%s"}' % (b"x" * 80)
        began = time.perf_counter()
        for _ in range(samples):
            self(b"probe", value)
        return (time.perf_counter() - began) / samples
