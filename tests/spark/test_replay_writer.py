"""The replay writer's record-to-produce mapping, broker-less: which headers go out in which
order, and what each result row says, read column-wise from Arrow batches."""

from __future__ import annotations

import importlib
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from keyshared.spark.txn import TransactionSettings

writer = importlib.import_module("keyshared.spark.replay")  # the package exports replay()

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
INPUT = pa.schema([
    ("dlq_topic", pa.string()), ("dlq_partition", pa.int32()), ("dlq_offset", pa.int64()),
    ("key", pa.binary()), ("value", pa.binary()), ("headers", HEADERS),
    ("source_topic", pa.string()), ("source_partition", pa.int32()),
    ("source_offset", pa.int64()), ("target_topic", pa.string()),
    ("target_partition", pa.int32()),
])  # fmt: skip


class FakeTransaction:
    """Records what the writer produces; every record lands at offset 100 + its index."""

    produced: list[tuple[Any, ...]] = []

    def __init__(self, settings: TransactionSettings, task: int, attempt: int) -> None:
        self.pending: list[Any] = []

    def already_committed(self) -> bool:
        return False

    def produce(self, topic: str, partition: int, key: Any, value: Any, headers: Any,
                on_offset: Any) -> None:  # fmt: skip
        FakeTransaction.produced.append((topic, partition, key, value, headers))
        self.pending.append(on_offset)

    def flush(self) -> None:
        for on_offset in self.pending:
            on_offset(100 + len(FakeTransaction.produced) - len(self.pending))
            self.pending = self.pending[1:]

    def commit(self) -> None:
        self.flush()


def test_the_writer_keeps_user_headers_in_order_and_reports_every_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(writer, "TaskTransaction", FakeTransaction)
    FakeTransaction.produced = []
    rows = [
        {"dlq_topic": "d", "dlq_partition": 0, "dlq_offset": 7, "key": b"a", "value": b"a1",
         "headers": [{"key": "keyshared.source.topic", "value": b"s"},
                     {"key": "trace", "value": b"t1"}, {"key": "x", "value": None}],
         "source_topic": "s", "source_partition": 2, "source_offset": 40,
         "target_topic": "t", "target_partition": 2},
        {"dlq_topic": "d", "dlq_partition": 1, "dlq_offset": 8, "key": None, "value": None,
         "headers": None, "source_topic": "s", "source_partition": 0, "source_offset": 41,
         "target_topic": "t", "target_partition": 0},
        {"dlq_topic": "d", "dlq_partition": 0, "dlq_offset": 9, "key": b"a", "value": b"a2",
         "headers": [{"key": "keyshared.reason", "value": b"parked"}],
         "source_topic": "s", "source_partition": 2, "source_offset": 42,
         "target_topic": "t", "target_partition": 2},
    ]  # fmt: skip
    table = pa.Table.from_pylist(rows, schema=INPUT)
    batches = [table.slice(0, 1).to_batches()[0], table.slice(1, 2).to_batches()[0]]
    settings = TransactionSettings("replay", "r", {})
    out = pa.Table.from_batches(list(writer._write_task(iter(batches), settings, 5, None)))

    stamp = ("keyshared.replay.time", b"5")
    assert FakeTransaction.produced == [
        ("t", 2, b"a", b"a1", [("trace", b"t1"), ("x", None), stamp,
                               ("keyshared.replay.dlq", b"d/0/7")]),
        ("t", 0, None, None, [stamp, ("keyshared.replay.dlq", b"d/1/8")]),
        ("t", 2, b"a", b"a2", [stamp, ("keyshared.replay.dlq", b"d/0/9")]),
    ]  # fmt: skip
    assert out.schema == writer._arrow_schema()
    assert out.to_pylist() == [
        {"dlq_partition": r["dlq_partition"], "dlq_offset": r["dlq_offset"], "key": r["key"],
         "source_topic": "s", "source_partition": r["source_partition"],
         "source_offset": r["source_offset"], "target_topic": "t",
         "target_partition": r["target_partition"], "target_offset": 100 + i, "task": 0,
         "attempt": 0, "outcome": "replayed"}
        for i, r in enumerate(rows)
    ]  # fmt: skip


_HEADER = st.tuples(st.sampled_from(["trace", "x", "keyshared.source.topic", "keyshared.reason"]),
                    st.none() | st.binary(max_size=3))  # fmt: skip


@example(entries=[(True, [("trace", b"1")]), (False, [("x", b"2")])], cut=(0, 2))
@given(
    entries=st.lists(st.tuples(st.booleans(), st.lists(_HEADER, max_size=3)), max_size=6),
    cut=st.tuples(st.integers(0, 6), st.integers(0, 6)),
)
def test_each_record_gets_its_own_headers_whatever_the_arrow_layout(
    entries: list[tuple[bool, list[tuple[str, bytes | None]]]], cut: tuple[int, int]
) -> None:
    """Arrow lets a null list own a non-empty stretch of the values, and a batch be a slice of
    a bigger one: neither may move one record's headers onto another."""
    bounds = [0]
    for _null, headers in entries:
        bounds.append(bounds[-1] + len(headers))
    flat = [h for _null, headers in entries for h in headers]
    struct = pa.StructArray.from_arrays(
        [pa.array([k for k, _ in flat], pa.string()), pa.array([v for _, v in flat], pa.binary())],
        names=["key", "value"],
    )
    lists = pa.ListArray.from_arrays(
        pa.array(bounds, pa.int32()),
        struct,
        mask=pa.array([null for null, _ in entries], pa.bool_()),
    )
    n = len(entries)
    columns = {
        "dlq_topic": pa.array(["d"] * n), "dlq_partition": pa.array([0] * n, pa.int32()),
        "dlq_offset": pa.array(range(n), pa.int64()), "key": pa.array([b"k"] * n),
        "value": pa.array([b"v"] * n), "headers": lists, "source_topic": pa.array(["s"] * n),
        "source_partition": pa.array([0] * n, pa.int32()),
        "source_offset": pa.array(range(n), pa.int64()), "target_topic": pa.array(["t"] * n),
        "target_partition": pa.array([0] * n, pa.int32()),
    }  # fmt: skip
    batch = pa.RecordBatch.from_arrays([columns[f.name] for f in INPUT], schema=INPUT)
    start = min(cut[0], n)
    batch = batch.slice(start, cut[1])
    stamp = ("keyshared.replay.time", b"1")
    got = [headers for *_, headers in writer._records(batch, stamp)]
    expected = [
        [h for h in ([] if null else headers) if not h[0].startswith("keyshared.")]
        + [stamp, ("keyshared.replay.dlq", f"d/0/{start + i}".encode())]
        for i, (null, headers) in enumerate(entries[start : start + batch.num_rows])
    ]
    assert got == expected
