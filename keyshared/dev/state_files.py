"""Reading and writing the local clusters' JSON state files (one server or a topology).

Both kinds carry a format number, are replaced atomically, and name the way out when they
cannot be read: `keyshared dev down` stops what still runs from the folder and removes them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from keyshared.dev.errors import ClusterStateError

__all__ = ["read_state_file", "write_state_file"]

T = TypeVar("T")


def read_state_file(path: Path, fmt: int, build: Callable[[dict[str, Any]], T]) -> T | None:
    """``build`` applied to the file's object; None when there is no file.

    :raises ClusterStateError: the file exists but is not a state file of format ``fmt``, or
        ``build`` refuses its content (ValueError, TypeError, KeyError).
    """
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return None
    try:
        data: Any = json.loads(raw)
        if not isinstance(data, dict) or data.get("format") != fmt:
            raise ValueError(f'expected an object with "format": {fmt}')
        return build(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise ClusterStateError(
            f"the state file {path} is unreadable ({exc}). `keyshared dev down` stops any "
            "server still running from this folder and removes the file."
        ) from exc


def write_state_file(path: Path, state: Any) -> None:
    """Replace the state file (a dataclass) atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(asdict(state), indent=2) + "\n")
    temporary.replace(path)
