"""``scaleout``: key_shared with 1, 2 and 4 member processes on one partition.

A plain consumer group cannot put more than one member on a partition; key_shared splits the
partition's keys by slot. Each run starts ``n`` ``keyshared run --mode key_shared`` processes
with an I/O-bound handler (sleep), waits until the leader has split the slots and every member
holds its leases, then produces the backlog and times how long the group's low watermark (the
lowest cursor over every slot, read from ZooKeeper) takes to reach the end. The ratio of the
4-member rate to the 1-member rate is the figure (goal >= 3.5).

Alongside: ZooKeeper writes per second during the 4-member run (the server's zxid advances by
one per write transaction, and only this run writes), and the drain time of a range move under
load (``keyshared assign`` to pinned-and-held by the new owner).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from keyshared.bench.context import BenchContext
from keyshared.bench.registry import register
from keyshared.bench.result import Measurement, ScenarioResult
from keyshared.kafka.client_config import KEYED_PRODUCER

__all__ = ["run_scaleout"]

_ZXID_PROBE = "/keyshared-bench-zxid/probe-"


@register("scaleout", "key_shared, 1 partition, 1/2/4 member processes, I/O-bound handler")
def run_scaleout(ctx: BenchContext) -> ScenarioResult:
    from coordinator import ZooKeeperCoordinator

    if ctx.zookeeper is None:
        raise RuntimeError("scaleout needs ZooKeeper: give --zookeeper or use the local cluster")
    sleep_s = (ctx.handler_ms if ctx.handler_ms is not None else 10.0) / 1000.0
    workers = ctx.workers or 16
    per_member = workers / sleep_s  # W/L of one member
    # Each run lasts about the same time at its bound (12 s full, 2 s quick), so fixed costs
    # (the cursor flush interval, the end-of-run detection) weigh the same on every run.
    per_run_s = ctx.size(12.0, 2.0)
    result = ScenarioResult(
        "scaleout",
        "key_shared on one partition: 1, 2 and 4 member processes",
        {
            "seconds_at_the_bound": per_run_s,
            "handler_ms": sleep_s * 1000,
            "workers_per_member": workers,
            "keys": 5000,
        },
    )
    rates: dict[int, float] = {}
    with ZooKeeperCoordinator(ctx.zookeeper) as zk:
        for members in (1, 2, 4):
            records = ctx.records or int(per_member * members * per_run_s)
            ctx.say(f"scaleout: {members} member(s), {records} records")
            run = _Run(ctx, zk, members, workers, sleep_s)
            try:
                seconds, zk_writes = run.measure(records)
                if members == 4:
                    drain = run.move_a_range(records)
                    result.add(
                        Measurement(
                            "range move under load: assign to lease held",
                            kind="measured",
                            value=round(drain, 3),
                            unit="s",
                        )
                    )
            finally:
                run.close()
            rates[members] = records / seconds
            result.add(Measurement(f"key_shared, {members} member(s)", records, seconds))
            result.add(
                Measurement(
                    f"W/L bound, {members} member(s)",
                    kind="bound",
                    value=round(per_member * members),
                    unit="records/s",
                )
            )
            if members == 4:
                result.add(
                    Measurement(
                        "ZooKeeper writes during the 4-member run",
                        kind="measured",
                        value=round(zk_writes / seconds, 1),
                        unit="writes/s",
                        extra={"records_per_second": round(records / seconds)},
                    )
                )
    result.ratio("4_members_vs_1", rates[4], rates[1])
    result.ratio("2_members_vs_1", rates[2], rates[1])
    result.notes.append(
        "goal: 4 members >= 3.5x one member; each member reads the whole partition and skips "
        "the slots it does not own"
    )
    return result


class _Run:
    """``n`` member processes of one fresh group on one fresh single-partition topic."""

    def __init__(
        self, ctx: BenchContext, zk: Any, members: int, workers: int, sleep_s: float
    ) -> None:
        self.ctx, self.zk = ctx, zk
        self.topic = ctx.new_topic("scaleout", 1)
        self.group = ctx.new_group("scaleout")
        self.names = [f"m{i}" for i in range(members)]
        env = {**os.environ, "KS_BENCH_SLEEP_S": str(sleep_s)}
        command = [
            sys.executable,
            "-c",
            "from keyshared.cli import main; main()",
            "run",
            "keyshared.bench.sleep_handler:handle",
            "-b",
            ctx.bootstrap,
            "-g",
            self.group,
            "-t",
            self.topic,
            "--mode",
            "key_shared",
            "--zookeeper",
            str(ctx.zookeeper),
            "--workers",
            str(workers),
            "--poison",
            "drop",
            "--commit-interval",
            "0.5",
            "--log-level",
            "WARNING",
        ]
        self.procs = [
            subprocess.Popen(
                [*command, "-X", f"client.id={name}"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for name in self.names
        ]
        _wait(lambda: self._balanced(set(self.names)), 60, "members to split the slots")

    def _balanced(self, members: set[str]) -> bool:
        ranges = self.zk.status(self.group).ranges
        return {r.owner for r in ranges} == members and all(
            r.lease_holders == (r.owner,) for r in ranges
        )

    def measure(self, records: int) -> tuple[float, int]:
        """Produce ``records`` and time until every slot's cursor reached the end."""
        zxid_before = _zxid(self.zk)
        began = time.monotonic()
        end = _produce(self.ctx.bootstrap, self.topic, records)
        _wait(lambda: self._low_watermark() >= end, 600, "the group to reach the end")
        seconds = time.monotonic() - began
        return seconds, _zxid(self.zk) - zxid_before

    def _low_watermark(self) -> int:
        from keyshared.modes.range_cursors import low_watermarks

        found = low_watermarks(self.zk.status(self.group).cursors)
        return min((tp.offset for tp in found), default=-1)

    def move_a_range(self, records: int) -> float:
        """Pin a range of m0 to m1 while a second backlog is consumed; seconds until m1 holds
        it (m0's drain of its in-flight records there included)."""
        slots = next(r.slots for r in self.zk.status(self.group).ranges if r.owner == "m0")
        _produce(self.ctx.bootstrap, self.topic, records // 2)
        time.sleep(0.5)  # let the load build up: the move must drain real in-flight work
        began = time.monotonic()
        self.zk.pins(self.group).set(slots, "m1")

        def moved() -> bool:
            overlapping = [r for r in self.zk.status(self.group).ranges if r.slots.overlaps(slots)]
            return all(r.owner == "m1" and r.lease_holders == ("m1",) for r in overlapping)

        _wait(moved, 120, "the pinned range to move")
        return time.monotonic() - began

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


def _produce(bootstrap: str, topic: str, records: int) -> int:
    """Produce ``records`` over 5,000 keys; return the end offset of the partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **KEYED_PRODUCER})
    for i in range(records):
        producer.produce(topic, key=b"key-%d" % (i % 5000), value=b"x")
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(60)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "ks-bench-probe"})
    try:
        return int(probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        probe.close()


def _zxid(zk: Any) -> int:
    """The ZooKeeper server's last zxid: write a throwaway znode and read its creation zxid."""
    path = zk.client.create(_ZXID_PROBE, b"", ephemeral=True, sequence=True, makepath=True)
    stat = zk.client.exists(path)
    zk.client.delete(path)
    return int(stat.czxid) & 0xFFFFFFFF


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"scaleout: timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.1)
