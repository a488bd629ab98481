"""One local SparkSession for every Spark test, and helpers to build and read DLQs.

Why one session: a JVM start costs ~15 s on the CI machine, so the whole layer shares it.
``local[2,4]``: two cores, and up to 4 failures per task, so a task that fails once (the test
hook in ``keyshared.spark.faults``) is retried as on a cluster. Few shuffle partitions and no
UI keep small jobs fast.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from keyshared.spark import spark_session

REPO = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here that uses Spark is an integration test (it also needs the broker)."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session's SparkSession; its Python workers can import ``tests.*``."""
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{REPO}{os.pathsep}{path}" if path else str(REPO)
    session = spark_session(
        "local[2,4]",
        app_name="keyshared-tests",
        shuffle_partitions=4,
        conf={"spark.sql.adaptive.enabled": "false", "spark.driver.memory": "1g"},
    )
    yield session
    session.stop()


@pytest.fixture
def fault(spark: Any) -> Iterator[Any]:
    """``fault("replay:mid")``: the next jobs of this thread fail each task's first attempt."""

    def inject(points: str) -> None:
        spark.sparkContext.setLocalProperty("keyshared.fault", points)

    yield inject
    spark.sparkContext.setLocalProperty("keyshared.fault", None)
