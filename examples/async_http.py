"""An ``async def`` handler calling an HTTP service: many requests in flight, in order per key.

Run against the local cluster (one command)::

    eval "$(keyshared dev up)" && python examples/async_http.py --requests 2000

The example starts its own tiny HTTP pricing service on 127.0.0.1 (asyncio, 20 ms per reply, no
third-party HTTP library), produces price-check requests keyed by SKU and consumes them with an
``async def`` handler. keyshared runs up to ``--concurrency`` coroutines at once on one event
loop; requests of the same SKU still run one after another. The summary line shows how many
requests the service saw at once and the speed-up over awaiting them one by one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

import keyshared

REPLY_DELAY_S = 0.020


class PricingService:
    """``GET /price?sku=...`` answers ``{"sku": ..., "cents": ...}`` after ``REPLY_DELAY_S``."""

    def __init__(self) -> None:
        self.port = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._serve, name="pricing-service", daemon=True).start()
        self._ready.wait(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._reply, "127.0.0.1", 0, backlog=1024)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _reply(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            request_line = (await reader.readline()).decode()
            sku = request_line.split("sku=", 1)[1].split(" ", 1)[0]
            await asyncio.sleep(REPLY_DELAY_S)
            body = json.dumps({"sku": sku, "cents": 100 + sum(map(ord, sku)) % 900}).encode()
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n")
            writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        finally:
            self.in_flight -= 1
            writer.close()


async def http_get_json(port: int, path: str) -> dict[str, object]:
    """A minimal HTTP/1.0 GET, enough for the example (use your HTTP client in real code)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.0 200"):
        raise ConnectionError(f"pricing service answered {head[:40]!r}")
    result: dict[str, object] = json.loads(body)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap-servers", default=os.environ.get("KEYSHARED_BOOTSTRAP_SERVERS")
    )
    parser.add_argument("--topic", default="price-checks")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--skus", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args(argv)
    if not args.bootstrap_servers:
        parser.error('no Kafka: run `eval "$(keyshared dev up)"` or pass --bootstrap-servers')
    admin = AdminClient({"bootstrap.servers": args.bootstrap_servers})
    for future in admin.create_topics([NewTopic(args.topic, 3, 1)]).values():
        try:
            future.result(30)
        except Exception as exc:  # already there from an earlier run
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    service = PricingService()
    run_id = uuid.uuid4().hex[:8]
    done = threading.Event()
    answered: list[int] = []

    async def check_price(record: keyshared.Record) -> None:
        request = json.loads(record.value)
        if request["run"] != run_id:
            return  # a request of an earlier run
        quote = await http_get_json(service.port, f"/price?sku={request['sku']}")
        answered.append(int(str(quote["cents"])))
        if len(answered) >= args.requests:
            done.set()

    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": args.bootstrap_servers, "group.id": f"{args.topic}-checker"},
        [args.topic],
        check_price,  # async def: run as coroutines, at most `workers` at once
        workers=args.concurrency,
    )
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    producer = Producer({"bootstrap.servers": args.bootstrap_servers, "enable.idempotence": True})
    began = time.monotonic()
    for n in range(args.requests):
        sku = f"sku-{n % args.skus:04d}"
        producer.produce(args.topic, key=sku, value=json.dumps({"run": run_id, "sku": sku}))
        producer.poll(0)
    producer.flush(30)
    finished = done.wait(120)
    elapsed = time.monotonic() - began
    consumer.stop()
    thread.join(60)
    serial = args.requests * REPLY_DELAY_S
    print(
        f"async-http: {len(answered)}/{args.requests} price checks in {elapsed:.1f} s; the "
        f"service saw up to {service.max_in_flight} requests at once; one at a time would "
        f"take {serial:.0f} s ({serial / elapsed:.0f}x slower)"
    )
    return 0 if finished else 1


if __name__ == "__main__":
    sys.exit(main())
