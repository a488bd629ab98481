"""The demo's order handler: an I/O-like call per order, a declined card for poison orders.

It reports every start and finish to the :class:`~keyshared.demo.verifier.OrderVerifier`, which
is how the summary can prove per-key order for the whole run rather than assume it.
"""

from __future__ import annotations

import json
import threading
import time

from keyshared.demo.verifier import OrderVerifier
from keyshared.record import Record

__all__ = ["OrderHandler", "PaymentDeclined"]


class PaymentDeclined(Exception):
    """The (simulated) payment gateway declined the order's card: it will never succeed."""


class OrderHandler:
    """Call it with a record: it 'charges' the order (sleeps ``latency_s``) or raises.

    :param verifier: told about every start and finish.
    :param latency_s: simulated I/O time of one call (a database or payment API).
    :param max_attempts: the consumer's retry attempts, to count orders given up on.
    """

    def __init__(self, verifier: OrderVerifier, latency_s: float, max_attempts: int) -> None:
        self.verifier = verifier
        self.latency_s = latency_s
        self.max_attempts = max_attempts
        self.given_up = 0
        self.handler_seconds = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, record: Record) -> None:
        order = json.loads(record.value)
        key, seq = str(order["customer"]), int(order["seq"])
        self.verifier.started(key, seq, record.attempt)
        began = time.perf_counter()
        ok = False
        try:
            time.sleep(self.latency_s)
            if order["poison"]:
                raise PaymentDeclined(f"card {order['card']} declined for order {key}/{seq}")
            ok = True
        finally:
            elapsed = time.perf_counter() - began
            with self._lock:
                self.calls += 1
                self.handler_seconds += elapsed
                if not ok and record.attempt >= self.max_attempts:
                    self.given_up += 1
            self.verifier.finished(key, seq, ok)

    @property
    def mean_latency_s(self) -> float:
        return self.handler_seconds / self.calls if self.calls else self.latency_s
