"""What every scenario needs: the broker, fresh topics and groups, sizes, a place to talk.

Why fresh topics per scenario: a scenario's baselines read the same topic with different groups,
so they see exactly the same records; a new topic per scenario keeps runs independent and is
deleted afterwards (best effort) so repeated runs do not fill the broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from confluent_kafka.admin import AdminClient
from rich.console import Console

from keyshared.bench.shapes import Shape
from keyshared.dev.topics import create_topic, delete_topics, unique_name

__all__ = ["BenchContext"]

_T = TypeVar("_T")


@dataclass
class BenchContext:
    """The run-wide settings a scenario reads.

    :param bootstrap: Kafka bootstrap servers.
    :param quick: smoke sizes (seconds per scenario) instead of the documented full sizes.
    :param records: override of the scenario's main record count, if given.
    :param handler_ms: override of the simulated handler latency, if given.
    :param workers: override of keyshared's worker count, if given.
    :param quix_python: interpreter that has quixstreams installed (None: this one).
    :param zookeeper: ZooKeeper hosts, for the coordinator's scenarios.
    :param parallel_consumer: race Confluent Parallel Consumer when its jars are cached.
    :param pyrallel: race pyrallel-consumer when ``pyrallel_python`` can import it.
    :param pyrallel_python: interpreter with pyrallel-consumer (None: the venv that
        ``keyshared bench --install-peers`` makes in the peers cache).
    :param shapes: workload shapes of the ``io`` scenarios (None: all of them).
    :param out: the results folder, for a scenario that writes its own files beside
        ``results.json`` (the sweep's table and chart); None: it writes none.
    """

    bootstrap: str
    quick: bool = False
    records: int | None = None
    handler_ms: float | None = None
    workers: int | None = None
    quix_python: str | None = None
    zookeeper: str | None = None  # for the coordinator's scenarios (scaleout)
    parallel_consumer: bool = True
    pyrallel: bool = True
    pyrallel_python: str | None = None
    shapes: tuple[Shape, ...] | None = None
    out: Path | None = None
    console: Console = field(default_factory=lambda: Console(stderr=True, highlight=False))
    _topics: list[str] = field(default_factory=list)
    _admin: AdminClient | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def size(self, full: _T, quick: _T) -> _T:
        """The full-run value, or the smoke value under ``--quick``."""
        return quick if self.quick else full

    def new_topic(self, prefix: str, partitions: int) -> str:
        """A fresh topic with ``partitions`` partitions, ready (leaders elected) when returned."""
        name = unique_name(f"bench-{prefix}")
        create_topic(self.admin, name, partitions)
        self._topics.append(name)
        return name

    @staticmethod
    def new_group(prefix: str) -> str:
        return unique_name(f"bench-{prefix}")

    def say(self, text: str) -> None:
        """Progress for people, on stderr, so stdout stays clean for the table."""
        self.console.print(f"  [dim]{text}[/]")

    def close(self) -> None:
        """Delete the topics this run created."""
        delete_topics(self.admin, self._topics)
        self._topics.clear()
