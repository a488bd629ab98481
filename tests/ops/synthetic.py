"""A stand-in exporter that drives every facade method with plausible values.

Why it exists: it exercises every metric family — including the coordinator's, which no consumer
feeds until the ZooKeeper coordinator lands, and rare events (drain timeouts, DLQ write
failures, metadata overflows) that a short real run may not produce — so the dashboard's PromQL
and label plumbing can be proven against a real Prometheus on their own. It proves nothing about
whether the consumer calls the facade; ``test_dashboard_queries_on_a_real_consumer`` does that.
"""

from __future__ import annotations

import random
import threading

from keyshared.core.holding import Phase
from keyshared.metrics import (
    ConsumerMetrics,
    CoordinatorMetrics,
    MetricsServer,
    start_metrics_server,
)

__all__ = ["SyntheticExporter"]


class SyntheticExporter:
    """Serves metrics of one fake member on a free port while a thread keeps them moving.

    :param group: the ``group`` label value.
    :param topic: the ``topic`` label value.
    :param member: the ``member`` label value.
    """

    def __init__(self, group: str, topic: str, member: str = "synthetic-1") -> None:
        self.group, self.topic = group, topic
        self.consumer = ConsumerMetrics(group, member)
        self.coordinator = CoordinatorMetrics(group, member)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="synthetic-exporter", daemon=True)
        self._server: MetricsServer | None = None
        self._rng = random.Random(7)

    @property
    def target(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.port}"

    def start(self) -> None:
        self._server = start_metrics_server(0, hotkeys=lambda: {"synthetic": True})
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._server is not None:
            self._server.close()
        self.consumer.close()
        self.coordinator.close()

    def _run(self) -> None:
        rng, c, z = self._rng, self.consumer, self.coordinator
        offsets = [0, 0, 0]
        committed = [0, 0, 0]
        c.set_workers(4)
        z.session("connected")
        c.declare_holds(("zookeeper-connection", "zookeeper-liveness"))
        tick = 0
        while not self._stop.wait(0.1):
            tick += 1
            for p in range(3):
                m = c.partition(self.topic, p)
                n = rng.randint(5, 20)
                offsets[p] += n
                m.received.inc(n)
                m.processed.inc(n - 1)
                m.failed.inc()
                m.retried.inc()
                for attr in ("dropped", "dead_lettered", "parked", "filtered", "skipped_done"):
                    if rng.random() < 0.3:
                        getattr(m, attr).inc()
                for _ in range(3):
                    m.handler_seconds.observe(rng.expovariate(200))
                    m.end_to_end_seconds.observe(rng.expovariate(5))
                if tick % 10 == 0:
                    committed[p] = offsets[p] - rng.randint(0, 10)
                    m.update(
                        in_flight=rng.randint(0, 4),
                        waiting=rng.randint(0, 50),
                        busy_keys=rng.randint(0, 4),
                        blocked_keys=rng.randint(0, 1),
                        paused=rng.random() < 0.2,
                        safe_cursor=offsets[p] - rng.randint(0, 5),
                        committed=committed[p],
                        high_watermark=offsets[p] + rng.randint(0, 100),
                        oldest_incomplete_age=rng.random() * 3,
                        hot_key_share=rng.random() / 2,
                    )
            c.set_holds({"zookeeper-connection": tick / 10} if tick % 50 < 10 else {})
            c.commit(rng.random() > 0.1)
            c.metadata(rng.randint(10, 4000), overflow=rng.random() < 0.1)
            c.dlq_written(f"{self.topic}.dlq")
            if rng.random() < 0.1:
                c.dlq_write_failed(f"{self.topic}.dlq")
            for w in range(4):
                c.worker_queue_depth(w, rng.randint(0, 30))
            c.set_paused_partitions(rng.randint(0, 1))
            if rng.random() < 0.05:
                c.keys_split(self.topic)
            if tick % 10 == 0:
                c.rebalance(rng.choice(["assigned", "revoked", "lost"]))
                c.drain(rng.random(), timed_out=rng.random() < 0.3)
                z.generation(tick // 10)
                z.owned(self.topic, ranges=2, slots=32768 + rng.randint(-100, 100))
                z.pending_drains(rng.randint(0, 2))
                z.holdings("key_shared", {Phase.ACTIVE: 2, Phase.WAITING: rng.randint(0, 1)})
                z.handover_waited(rng.random())
                z.fenced()
                z.session("suspended" if rng.random() < 0.1 else "connected")
