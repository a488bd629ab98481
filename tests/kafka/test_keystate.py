"""KeyStateStore against the real broker: parked keys survive a restart, a release written by
one process reaches another, null and empty keys stay distinct, the topic is compacted."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource  # not re-exported for mypy

from keyshared.cli.release import release
from keyshared.dev.topics import GroupFactory, delete_topics
from keyshared.kafka.keystate import KeyStateStore, decode_key, encode_key, topic_for
from keyshared.runtime.scheduler import Scheduler
from tests.helpers import wait_until

pytestmark = pytest.mark.integration

WAIT = 30.0
Release = tuple[str, int, bytes | None]


class Releases:
    """Collects ``on_release`` calls and lets a test wait for a given one."""

    def __init__(self) -> None:
        self.seen: list[Release] = []
        self._cond = threading.Condition()

    def __call__(self, topic: str, partition: int, key: bytes | None) -> None:
        with self._cond:
            self.seen.append((topic, partition, key))
            self._cond.notify_all()

    def wait_for(self, release: Release) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: release in self.seen, WAIT)


@pytest.fixture
def scheduler() -> Iterator[Scheduler]:
    s = Scheduler()
    yield s
    s.close()


@pytest.fixture
def group(new_group: GroupFactory, kafka_bootstrap: str) -> Iterator[str]:
    name = new_group("keystate")
    yield name
    delete_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), [topic_for(name)])


@pytest.fixture
def open_store(
    kafka_bootstrap: str, group: str, scheduler: Scheduler
) -> Iterator[Callable[..., KeyStateStore]]:
    stores: list[KeyStateStore] = []

    def make(on_release: Callable[[str, int, bytes | None], None] | None = None) -> KeyStateStore:
        config = {"bootstrap.servers": kafka_bootstrap, "group.id": group}
        store = KeyStateStore(config, group, on_release or Releases(), scheduler.call_later)
        store.start()
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def park(store: KeyStateStore, topic: str, partition: int, key: bytes | None, offset: int) -> None:
    durable = threading.Event()
    store.park(topic, partition, key, offset, still_wanted=lambda: True, on_durable=durable.set)
    assert durable.wait(WAIT), f"park of {key!r} was never acknowledged"


def test_record_key_codec_is_binary_safe_and_keeps_null_apart_from_empty() -> None:
    for key in (None, b"", b"\x00\xff\x80", "ключ".encode()):
        assert decode_key(encode_key("orders", 7, key)) == ("orders", 7, key)
    assert encode_key("t", 0, None) != encode_key("t", 0, b"")


def test_topic_is_created_compacted_with_one_partition(
    kafka_bootstrap: str, group: str, open_store: Callable[..., KeyStateStore]
) -> None:
    store = open_store()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    metadata = admin.list_topics(store.topic, timeout=WAIT).topics[store.topic]
    assert metadata.error is None and len(metadata.partitions) == 1
    resource = ConfigResource(ConfigResource.Type.TOPIC, store.topic)
    config = admin.describe_configs([resource])[resource].result(WAIT)
    assert config["cleanup.policy"].value == "compact"
    open_store()  # a second member finds the topic and does not fail


def test_parked_keys_survive_a_restart(open_store: Callable[..., KeyStateStore]) -> None:
    first = open_store()
    park(first, "orders", 0, b"k1", 10)
    park(first, "orders", 0, b"k2", 11)
    park(first, "orders", 2, b"\x00\xff", 12)
    park(first, "payments", 0, b"k1", 13)
    first.close()

    restarted = open_store()
    loaded = restarted.load([("orders", 0), ("orders", 1), ("orders", 2)], timeout=WAIT)
    assert loaded == {("orders", 0): {b"k1", b"k2"}, ("orders", 1): set(),
                      ("orders", 2): {b"\x00\xff"}}  # fmt: skip
    state = restarted.get("orders", 0, b"k2")
    assert state is not None and (state.state, state.offset) == ("parked", 11)


def test_load_sees_a_park_acknowledged_just_before_it(
    open_store: Callable[..., KeyStateStore],
) -> None:
    writer, reader = open_store(), open_store()
    for offset in range(50):
        park(writer, "orders", 1, f"k{offset}".encode(), offset)
    assert len(reader.load([("orders", 1)], timeout=WAIT)[("orders", 1)]) == 50


def test_release_in_another_process_reaches_a_running_store(
    open_store: Callable[..., KeyStateStore],
) -> None:
    releases = Releases()
    consumer_side = open_store(releases)
    park(consumer_side, "orders", 3, b"poison", 42)
    assert consumer_side.load([("orders", 3)], timeout=WAIT) == {("orders", 3): {b"poison"}}

    operator_side = open_store()
    operator_side.release("orders", 3, b"poison")
    assert releases.wait_for(("orders", 3, b"poison"))
    assert consumer_side.load([("orders", 3)], timeout=WAIT) == {("orders", 3): set()}

    late = Releases()
    late_store = open_store(late)
    late_store.sync(WAIT)
    park(late_store, "orders", 3, b"marker", 43)
    late_store.release("orders", 3, b"marker")
    assert late.wait_for(("orders", 3, b"marker"))
    assert ("orders", 3, b"poison") not in late.seen, "history is state, not a new release"


def test_null_key_and_empty_key_are_distinct(open_store: Callable[..., KeyStateStore]) -> None:
    releases = Releases()
    store = open_store(releases)
    park(store, "orders", 0, None, 1)
    park(store, "orders", 0, b"", 2)
    assert store.load([("orders", 0)], timeout=WAIT) == {("orders", 0): {None, b""}}

    store.release("orders", 0, b"")
    assert releases.wait_for(("orders", 0, b""))
    assert ("orders", 0, None) not in releases.seen
    assert store.load([("orders", 0)], timeout=WAIT) == {("orders", 0): {None}}
    assert open_store().load([("orders", 0)], timeout=WAIT) == {("orders", 0): {None}}


def test_blocked_keys_show_in_the_snapshot_and_are_cleared_for_a_new_owner(
    open_store: Callable[..., KeyStateStore],
) -> None:
    releases = Releases()
    store = open_store(releases)
    store.record_blocked("orders", 0, b"\xff\xfe", 5, "ValueError('bad')")
    park(store, "orders", 0, "ключ".encode(), 6)
    park(store, "orders", 1, None, 7)
    store.sync(WAIT)
    rows: list[dict[str, Any]] = store.snapshot()
    simplified = [(r["partition"], r["key"], r["key_encoding"], r["state"], r["offset"])
                  for r in rows]  # fmt: skip
    assert simplified == [(0, "ключ", "utf-8", "parked", 6), (0, "fffe", "hex", "blocked", 5),
                          (1, None, "null", "parked", 7)]  # fmt: skip
    assert rows[1]["error"] == "ValueError('bad')"

    new_owner = open_store()
    assert new_owner.load([("orders", 0)], timeout=WAIT) == {("orders", 0): {"ключ".encode()}}
    wait_until(lambda: new_owner.get("orders", 0, b"\xff\xfe") is None, "the stale block cleared")
    wait_until(lambda: store.get("orders", 0, b"\xff\xfe") is None, "the first store to see it")
    assert releases.seen == [], "clearing a stale block is not an operator's release"


def test_release_command_releases_a_parked_key_in_a_running_store(
    kafka_bootstrap: str, group: str, open_store: Callable[..., KeyStateStore]
) -> None:
    releases = Releases()
    store = open_store(releases)
    park(store, "orders", 4, b"\xc3\x28", 99)  # not UTF-8: addressed by --key-hex
    result = CliRunner().invoke(release, [
        "--bootstrap-servers", kafka_bootstrap, "--group", group, "--topic", "orders",
        "--partition", "4", "--key-hex", "c328",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "key 0xc328 of orders[4]" in result.output and "parked at offset 99" in result.output
    assert releases.wait_for(("orders", 4, b"\xc3\x28"))

    unknown = CliRunner().invoke(release, [
        "-b", kafka_bootstrap, "-g", group, "-t", "orders", "-p", "0", "--null-key",
    ])  # fmt: skip
    assert unknown.exit_code == 0, unknown.output
    assert "the null key" in unknown.output and "not recorded" in unknown.output
    assert releases.wait_for(("orders", 0, None))


def test_release_command_refuses_an_unknown_group_and_ambiguous_keys(
    kafka_bootstrap: str, new_group: GroupFactory
) -> None:
    missing = new_group("never-ran")
    result = CliRunner().invoke(release, [
        "-b", kafka_bootstrap, "-g", missing, "-t", "orders", "-p", "0", "-k", "a",
    ])  # fmt: skip
    assert result.exit_code == 1 and "does not exist" in result.output
    metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=WAIT)
    assert topic_for(missing) not in metadata.topics, "a release must not create the topic"
    both = CliRunner().invoke(release, [
        "-b", kafka_bootstrap, "-g", missing, "-t", "orders", "-p", "0", "-k", "a", "--null-key",
    ])  # fmt: skip
    assert both.exit_code == 2 and "exactly one of" in both.output
