"""The layers' import rules, read from the source: the runtime never talks to Kafka.

``keyshared/runtime/`` runs handlers and keeps windows; if it imported confluent-kafka, the
line between "what runs" and "what polls and commits" would be gone, and so would its
broker-less test layer. ``keyshared/core/`` is stricter still: no I/O library and no threads.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "keyshared"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, wherever the import stands (``TYPE_CHECKING`` included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def offenders(layer: str, forbidden: tuple[str, ...], root: Path = PACKAGE) -> list[str]:
    found = []
    place = root / layer
    for path in sorted(place.rglob("*.py")) if place.is_dir() else [place]:
        for module in sorted(imported_modules(path)):
            if module.split(".")[0] in forbidden or module.startswith(forbidden):
                found.append(f"{path.relative_to(REPO)} imports {module}")
    return found


# The layers above the runtime: it is handed what it needs of them (protocols in
# keyshared/runtime/sinks.py and control.py), and never names them, not even for a type.
ABOVE_RUNTIME = tuple(
    f"keyshared.{name}"
    for name in ("kafka", "consumer", "modes", "cli", "ops", "bench", "spark", "demo", "testing")
)

# The core is the bottom floor: it names no other part of keyshared (errors.py aside).
ABOVE_CORE = (
    "keyshared.runtime",
    "keyshared.settings",
    "keyshared.record",
    "keyshared.metrics",
    "keyshared.dev",
    "coordinator",
    *ABOVE_RUNTIME,
)


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("runtime", ("confluent_kafka", "kazoo", *ABOVE_RUNTIME)),
        ("core", ("confluent_kafka", "kazoo", "prometheus_client", "threading", *ABOVE_CORE)),
        ("record.py", ("confluent_kafka", "keyshared.runtime", *ABOVE_RUNTIME)),
    ],
)
def test_a_layer_imports_nothing_it_must_not(layer: str, forbidden: tuple[str, ...]) -> None:
    assert offenders(layer, forbidden) == []


def test_the_recipes_know_nothing_of_their_callers() -> None:
    """``coordinator/`` is a library of ZooKeeper recipes: the modes use it, never the reverse."""
    callers = tuple(
        f"keyshared.{name}"
        for name in ("kafka", "runtime", "consumer", "modes", "cli", "metrics", "ops", "bench")
    )
    assert offenders("coordinator", callers, root=REPO) == []


def test_the_check_sees_an_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("if TYPE_CHECKING:\n    import confluent_kafka\n")
    assert "confluent_kafka" in imported_modules(module)
