"""A ledger in SQLite fed by a batch handler: one transaction per batch, each account in order.

Run against the local cluster (one command)::

    eval "$(keyshared dev up)" && python examples/batch_sqlite.py --events 20000

What it shows: the key is the account id, and the handler receives a ``list[Record]``
(``batch_size=200``). It writes every valid event of the batch to ``ledger.db`` with
``executemany`` in one transaction: one commit (one fsync) for up to 200 records instead of 200.
A batch never holds two events of one account, so each account's entries land in order while
accounts proceed in parallel. A malformed event (every ``--bad-every``-th) is named in a
``keyshared.BatchError``: only that event is retried and then dead-lettered to
``<topic>.dlq``; the rest of its batch is committed and counted done. At the end the example
reads the ledger back and checks that every account's entries are complete and in order.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

import keyshared

BATCH_SIZE = 200
MAX_ATTEMPTS = 2

SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger (
    account TEXT NOT NULL, seq INTEGER NOT NULL, amount_cents INTEGER NOT NULL,
    PRIMARY KEY (account, seq)
);
CREATE TABLE IF NOT EXISTS balances (account TEXT PRIMARY KEY, cents INTEGER NOT NULL);
"""


class Ledger:
    """The batch handler and the database it writes (one connection, one writer at a time)."""

    def __init__(self, path: Path, run_id: str, expected: int) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")  # synchronous=FULL (the default): durable
        self.db.executescript(SCHEMA)
        self.run_id = run_id
        self.expected = expected
        self.settled = 0  # written, or failed for good (dead-lettered)
        self.batches: list[int] = []
        self.done = threading.Event()
        self._lock = threading.Lock()

    def handle(self, batch: list[keyshared.Record]) -> None:
        """Write the batch's valid events in one transaction; name the invalid ones."""
        rows, failures = [], {}
        for index, record in enumerate(batch):
            event = json.loads(record.value)
            if event["run"] != self.run_id:
                continue  # an event of an earlier run of this example: done, nothing to write
            if not isinstance(event["amount_cents"], int):
                failures[index] = ValueError(f"malformed amount {event['amount_cents']!r}")
                continue
            rows.append((event["account"], event["seq"], event["amount_cents"]))
        with self._lock:  # SQLite has one writer; the lock beats its busy-wait retries
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR IGNORE INTO ledger VALUES (?, ?, ?)", rows)
            self.db.executemany(
                "INSERT INTO balances VALUES (?, ?) "
                "ON CONFLICT (account) DO UPDATE SET cents = cents + excluded.cents",
                [(account, cents) for account, _, cents in rows],
            )
            self.db.execute("COMMIT")
            self.batches.append(len(batch))
            final = sum(batch[i].attempt >= MAX_ATTEMPTS for i in failures)
            self._settle(len(rows) + final)
        if failures:
            # The valid rows are committed: only the named events are retried, then DLQ'd.
            raise keyshared.BatchError(failures)

    def _settle(self, count: int) -> None:
        self.settled += count
        if self.settled >= self.expected:
            self.done.set()

    def out_of_order(self) -> int:
        """Accounts whose entries were not inserted in sequence order (rowid = insert order)."""
        with self._lock:
            rows = self.db.execute("SELECT account, seq FROM ledger ORDER BY rowid").fetchall()
        last: dict[str, int] = {}
        wrong = 0
        for account, seq in rows:
            wrong += seq <= last.get(account, 0)
            last[account] = seq
        return wrong


def produce_events(
    bootstrap: str, topic: str, run_id: str, events: int, accounts: int, bad_every: int
) -> int:
    """``events`` account events, accounts interleaved at random, seq 1.. per account."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    rng = random.Random(run_id)
    seqs: dict[str, int] = {}
    bad = 0
    for n in range(events):
        account = f"acct-{rng.randrange(accounts):04d}"
        seqs[account] = seqs.get(account, 0) + 1
        is_bad = bad_every > 0 and n % bad_every == bad_every - 1
        bad += is_bad
        value = {
            "run": run_id,
            "account": account,
            "seq": seqs[account],
            "amount_cents": "12,50" if is_bad else rng.randrange(-5_000, 5_000),
        }
        producer.produce(topic, key=account.encode(), value=json.dumps(value).encode())
        producer.poll(0)
    producer.flush(30)
    return bad


def ensure_topics(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [NewTopic(topic, 3, 1), NewTopic(f"{topic}.dlq", 1, 1)]
    for future in admin.create_topics(wanted).values():
        try:
            future.result(30)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bootstrap-servers", default=os.environ.get("KEYSHARED_BOOTSTRAP_SERVERS")
    )
    parser.add_argument("--topic", default="ledger")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--accounts", type=int, default=500)
    parser.add_argument("--bad-every", type=int, default=2_000, help="every n-th event is bad")
    parser.add_argument("--db", type=Path, default=None, help="default: a temporary file")
    args = parser.parse_args(argv)
    if not args.bootstrap_servers:
        parser.error('no Kafka: run `eval "$(keyshared dev up)"` or pass --bootstrap-servers')
    run_id = uuid.uuid4().hex[:8]
    ensure_topics(args.bootstrap_servers, args.topic)
    folder = tempfile.TemporaryDirectory(prefix="keyshared-ledger-")
    ledger = Ledger(args.db or Path(folder.name) / "ledger.db", run_id, args.events)
    consumer = keyshared.KeySharedConsumer(
        {"bootstrap.servers": args.bootstrap_servers, "group.id": f"{args.topic}-ledger"},
        [args.topic],
        ledger.handle,
        workers=4,
        batch_size=BATCH_SIZE,
        poison="dead_letter",  # to f"{topic}.dlq", the default DLQ name
        retry=keyshared.RetryPolicy(max_attempts=MAX_ATTEMPTS, initial_backoff=0.05),
    )
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    began = time.monotonic()
    bad = produce_events(
        args.bootstrap_servers, args.topic, run_id, args.events, args.accounts, args.bad_every
    )
    ledger.done.wait()
    elapsed = time.monotonic() - began
    consumer.stop()
    thread.join(60)
    written = ledger.db.execute("SELECT count(*) FROM ledger").fetchone()[0]
    wrong = ledger.out_of_order()
    sizes = ledger.batches
    print(
        f"batch-sqlite: {written + bad}/{args.events} events of {args.accounts} accounts in "
        f"{elapsed:.1f} s, {len(sizes)} transactions (mean batch {sum(sizes) / len(sizes):.0f}, "
        f"max {max(sizes)}); dead-lettered {bad} to {args.topic}.dlq; "
        f"out-of-order entries {wrong}"
    )
    ledger.db.close()
    folder.cleanup()
    return 0 if wrong == 0 and written + bad == args.events else 1


if __name__ == "__main__":
    sys.exit(main())
