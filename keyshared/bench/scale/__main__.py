"""The command line (``python -m keyshared.bench.scale``, docs/scaling.md): runs the planner,
fragmentation, ZooKeeper and write-capacity measurements asked for and writes their figures
as JSON.

Only argument parsing and the order of runs live here; the measurements are importable from
the package without it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from keyshared.bench import scale
from keyshared.bench.scale.capacity import measure_write_capacity
from keyshared.bench.scale.measure import measure_zookeeper
from keyshared.bench.scale.planner import (
    fragmentation,
    load_planner,
    measure_planner,
    planner_table,
)
from keyshared.bench.scale.zookeeper_stats import private_zookeeper
from keyshared.core.assignment import plan_assignment


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m keyshared.bench.scale", description=(scale.__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--planner-members", type=_sizes, default=[10, 100, 1000])
    parser.add_argument("--planner-events", type=int, default=200)
    parser.add_argument(
        "--fragmentation",
        type=_sizes,
        default=[],
        help="member counts to follow under long churn (ranges only)",
    )
    parser.add_argument("--fragmentation-events", type=int, default=2000)
    parser.add_argument(
        "--planner-module",
        type=Path,
        help="measure the plan_assignment of this file instead (e.g. an older commit's, "
        "from git show main:keyshared/core/assignment.py)",
    )
    parser.add_argument("--members", type=_sizes, default=[10, 100], help="ZooKeeper runs")
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--events", type=int, default=4, help="churn events per ZooKeeper run")
    parser.add_argument("--steady-seconds", type=float, default=10.0)
    parser.add_argument(
        "--write-seconds",
        type=float,
        default=10.0,
        help="ZooKeeper's cursor write capacity, measured this long (0: skip)",
    )
    parser.add_argument("--zookeeper", help="host:port (default: a private server)")
    parser.add_argument("--out", type=Path, default=Path("scale-results.json"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # sessions closing at the end

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    results: dict[str, Any] = {
        "planner": [],
        "fragmentation": {},
        "zookeeper": [],
        "write_capacity": None,
    }
    planner = load_planner(args.planner_module) if args.planner_module else plan_assignment
    for n in args.fragmentation:
        every = max(1, args.fragmentation_events // 10)
        samples = fragmentation(n, args.fragmentation_events, every, planner=planner)
        say(f"fragmentation {n}: {samples}")
        results["fragmentation"][str(n)] = samples
    measured = []
    for n in args.planner_members:
        figures = measure_planner(n, args.planner_events, planner=planner)
        say(f"planner {n}: {asdict(figures)}")
        results["planner"].append(asdict(figures))
        measured.append(figures)
    if measured:
        say(planner_table(measured))
    if args.members or args.write_seconds > 0:
        server = contextlib.nullcontext(args.zookeeper) if args.zookeeper else private_zookeeper()
        with server as hosts:
            for n in args.members:
                zk = measure_zookeeper(
                    hosts, n, args.partitions, args.events, args.steady_seconds, say
                )
                results["zookeeper"].append(asdict(zk))
                args.out.write_text(json.dumps(results, indent=2) + "\n")
            if args.write_seconds > 0:
                capacity = measure_write_capacity(
                    hosts, args.partitions, seconds=args.write_seconds
                )
                say(f"write capacity: {asdict(capacity)}")
                results["write_capacity"] = asdict(capacity)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    say(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
