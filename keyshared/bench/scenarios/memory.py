"""``memory``: what a full window costs in RAM, per buffered record.

keyshared holds up to ``max_window`` records per partition (in flight or waiting behind their
key). Each probe runs in a fresh process (see :mod:`keyshared.bench.memory_probe`): keyshared
with every handler blocked until the window is full, and as the baseline a bare consumer that
keeps the same number of consumed messages in a list. The difference is keyshared's bookkeeping
per entry (window entry, key queue, offsets), on top of the message itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from keyshared.bench.context import BenchContext
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.bench.workload import produce, uniform_keys

__all__ = ["run_memory"]


def _probe(ctx: BenchContext, mode: str, records: int, key_count: int, workers: int) -> Any:
    topic = ctx.new_topic(f"mem-{mode}", 1)
    command = [
        sys.executable,
        "-m",
        "keyshared.bench.memory_probe",
        mode,
        ctx.bootstrap,
        topic,
        str(records),
        str(workers),
    ]
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as probe:
        assert probe.stdin is not None and probe.stdout is not None
        line = probe.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"memory probe ({mode}) did not start: {line!r}")
        produce(ctx.bootstrap, topic, uniform_keys(records, key_count))
        probe.stdin.write("go\n")
        probe.stdin.flush()
        out, _ = probe.communicate(timeout=300)
    if probe.returncode != 0:
        raise RuntimeError(f"memory probe ({mode}) exited with {probe.returncode}")
    return json.loads(out.strip().splitlines()[-1])


@register("memory", "RSS and bytes per in-flight entry with the window full")
def run_memory(ctx: BenchContext) -> ScenarioResult:
    records = ctx.records or ctx.size(50_000, 5_000)
    workers = ctx.workers or 64
    key_count = 10_000
    result = ScenarioResult(
        "memory",
        "resident memory per buffered record: keyshared's full window vs a list of messages",
        {"records": records, "keys": key_count, "workers": workers, "value_bytes": 100},
    )
    per_entry: dict[str, float] = {}
    for mode, label in (
        ("raw", "raw consumer keeping messages in a list"),
        ("keyshared", f"keyshared window full ({workers} handlers blocked)"),
    ):
        ctx.say(f"memory: {label}")
        probe = _probe(ctx, mode, records, key_count, workers)
        grown = probe["after"] - probe["before"]
        per_entry[mode] = grown / max(1, probe["entries"])
        result.add(
            Measurement(
                label,
                records=probe["entries"],
                kind="measured",
                value=per_entry[mode],
                unit="bytes/entry",
                extra={
                    "rss_before_mb": round(probe["before"] / 2**20, 1),
                    "rss_full_mb": round(probe["after"] / 2**20, 1),
                },
            )
        )
    ctx.say("memory: one key stuck, everything else fast")
    stuck = _probe(ctx, "stuck", records, key_count, workers)
    grown_mb = (stuck["after"] - stuck["before"]) / 2**20
    result.add(
        Measurement(
            f"one key stuck, default max_window: {stuck['entries']} of {records} records "
            "admitted before the partition paused",
            records=stuck["entries"],
            kind="measured",
            value=round(grown_mb, 1),
            unit="MiB RSS growth",
            extra={"cursor": stuck["cursor"]},
        )
    )
    result.ratio("keyshared_vs_raw_bytes_per_entry", per_entry["keyshared"], per_entry["raw"])
    result.ratios["keyshared_overhead_bytes_per_entry"] = round(
        per_entry["keyshared"] - per_entry["raw"], 1
    )
    result.notes.append(
        f"a full default window (max_window=10,000 per partition) costs about "
        f"{per_entry['keyshared'] * 10_000 / 2**20:.0f} MiB per partition with ~100-byte values"
    )
    return result
