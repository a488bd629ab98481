"""A realistic batch workload for ``keyshared bench batch``: records written to SQLite.

Why SQLite: it is the database every Python has, and it shows what batch handlers are for. A
write costs a transaction (a commit, a WAL append, the writer lock), so a handler that commits
once per record pays that per record, and one that writes its whole batch with ``executemany``
in one transaction pays it once per batch.

Each record is appended to ``events`` (its partition and offset the primary key, so a
redelivery after a crash is ignored, as an idempotent sink should) and counted in ``keys``, the
per-key running total an application would keep. The database runs in WAL mode with
``synchronous=FULL`` (SQLite's default): a commit is on disk when it returns. A handler that
returns has told keyshared the record is done, and keyshared then commits its offset; with
``synchronous=NORMAL`` a power cut could lose the last commits after their offsets were
committed, which at-least-once forbids. So each commit pays an fsync of the WAL (about 0.1 ms
on this machine's disk). SQLite allows one writer at a time, so the handlers take one lock
around each transaction rather than letting SQLite's busy handler sleep and retry.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from keyshared.record import Record

__all__ = ["SqliteSink"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    partition INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    key BLOB,
    value BLOB,
    PRIMARY KEY (partition, offset)
);
CREATE TABLE IF NOT EXISTS keys (
    key BLOB PRIMARY KEY,
    events INTEGER NOT NULL,
    last_offset INTEGER NOT NULL
);
"""
_INSERT_EVENT = "INSERT OR IGNORE INTO events (partition, offset, key, value) VALUES (?, ?, ?, ?)"
_COUNT_KEY = (
    "INSERT INTO keys (key, events, last_offset) VALUES (?, 1, ?) "
    "ON CONFLICT (key) DO UPDATE SET events = events + 1, last_offset = excluded.last_offset"
)


class SqliteSink:
    """One SQLite database file and the two ways of writing records to it.

    :param path: the database file (created with its tables).
    """

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def write_one(self, record: Record) -> None:
        """One transaction per record: what a single-record handler does."""
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            db.execute(_INSERT_EVENT, (record.partition, record.offset, record.key, record.value))
            db.execute(_COUNT_KEY, (record.key, record.offset))
            db.execute("COMMIT")

    def write_batch(self, batch: list[Record]) -> None:
        """One transaction per batch, each statement once with ``executemany``."""
        events = [(r.partition, r.offset, r.key, r.value) for r in batch]
        counts = [(r.key, r.offset) for r in batch]
        with self._lock:
            db = self._db
            db.execute("BEGIN")
            db.executemany(_INSERT_EVENT, events)
            db.executemany(_COUNT_KEY, counts)
            db.execute("COMMIT")

    def rows(self) -> int:
        """Events stored (distinct partition and offset)."""
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM events").fetchone()[0])

    def close(self) -> None:
        self._db.close()
