"""The runtime folder: where a local cluster keeps its state, and the lock that guards it.

Why a folder lock and not only a thread lock: `keyshared dev up` in one shell, `keyshared dev
down` in another and a pytest session may all act on the same folder at once. An exclusive
`flock` on `<runtime_dir>/.lock` serialises them across processes (and threads), so two `up`s
never start two brokers on the same data.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["RUNTIME_DIR_ENV", "default_runtime_dir", "folder_lock", "user_cache_dir"]

RUNTIME_DIR_ENV = "KEYSHARED_HOME"


def default_runtime_dir() -> Path:
    """`$KEYSHARED_HOME`, else `$XDG_CACHE_HOME/keyshared/dev`, else `~/.cache/keyshared/dev`."""
    return user_cache_dir(RUNTIME_DIR_ENV, "dev")


def user_cache_dir(override_env: str, leaf: str) -> Path:
    """`$override_env`, else `$XDG_CACHE_HOME/keyshared/<leaf>`, else `~/.cache/keyshared/<leaf>`:
    where every cache of keyshared lives outside the repository."""
    override = os.environ.get(override_env)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "keyshared" / leaf


@contextlib.contextmanager
def folder_lock(runtime_dir: Path) -> Iterator[None]:
    """An exclusive lock on `runtime_dir` (created if missing), across processes and threads."""
    runtime_dir.mkdir(parents=True, exist_ok=True)
    with (runtime_dir / ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
