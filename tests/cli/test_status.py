"""`keyshared status` against committed state made by the real consumer on the real broker."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from keyshared import Record
from keyshared.cli.status import status
from keyshared.core.offsets import encode_linked
from keyshared.dev.topics import TopicFactory
from keyshared.ops.group_status import classify_metadata, partition_status, refine_pending
from keyshared.ops.member_view import base_url, parse_metrics
from tests.cli.conftest import (
    StartConsumer,
    committed_to_end,
    invoke,
    invoke_json,
)
from tests.helpers import produce, wait_until

# -- pure parts (no broker) --------------------------------------------------------------------


def test_pending_ranges_skip_finished_offsets_recorded_in_the_metadata() -> None:
    from keyshared.core.offsets import encode_finished

    metadata = encode_finished(10, [11, 12, 15])
    part = partition_status("t", 0, committed=10, metadata=metadata, low=0, high=18)
    assert (part.metadata, part.finished_above_cursor, part.lag) == ("keyshared", 3, 8)
    assert part.pending == ((10, 10), (13, 14), (16, 17))
    assert part.pending_count == 5 and not part.done
    # A reader that saw only 13 and 17 below 18: 10, 14 and 16 hold no visible record.
    refined = refine_pending(part, [13, 17], probed_up_to=18)
    assert refined.pending == ((13, 13), (17, 17)) and refined.pending_count == 2


def test_metadata_kinds_and_urls() -> None:
    assert classify_metadata(5, "")[0] == "empty"
    assert classify_metadata(5, "ks1:,AAAAAAAAAAAAAAAAAAAAAB")[0] == "empty"  # a stamp alone
    assert classify_metadata(5, "someone else's")[0] == "foreign"
    assert classify_metadata(5, "ks1:garbage")[0] == "undecodable"
    # A linked exactly-once commit may name none of its set itself: not damaged.
    assert classify_metadata(5, encode_linked(5, [7, 9], link=3, max_bytes=16).text)[0] == (
        "keyshared"
    )
    assert base_url("127.0.0.1:9400/metrics/") == "http://127.0.0.1:9400"
    text = (
        "# TYPE keyshared_partition_lag gauge\n"
        'keyshared_partition_lag{group="g",member="m",topic="t",partition="2"} 7.0\n'
        'keyshared_partition_lag{group="other",member="m",topic="t",partition="2"} 9.0\n'
    )
    assert parse_metrics(text, "g") == {("t", 2): {"member": "m", "lag": 7.0}}


# -- against the broker ------------------------------------------------------------------------


def test_status_of_a_live_group_shows_cursor_members_and_what_holds_the_cursor_back(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str, start: StartConsumer
) -> None:
    """A slow key holds partition 0's cursor while later records of other keys finish: the
    metadata holds them, the lag counts them, and the member says how old the holdup is.

    Records (of either partition) whose key the ring puts on the slow key's worker wait behind
    it too, so how many stay unfinished depends on the hashing; the test reads that number from
    the member.
    """
    topic = new_topic(partitions=2)
    gate = threading.Event()

    def handle(record: Record) -> None:
        if record.key == b"slow":
            gate.wait(60)

    others = [(p, f"k{i}".encode(), b"v") for i in range(20) for p in (0, 1)]
    records: list[tuple[int, bytes | None, bytes]] = [(0, b"slow", b"0"), *others]
    offsets = produce(kafka_bootstrap, topic, records)
    run = start(group, topic, handle, metrics_port=0)
    try:
        assert run.consumer.metrics_url
        args = ["-g", group, "-t", topic, "--metrics-url", run.consumer.metrics_url]

        def settled() -> bool:
            """Everything not stuck behind the slow key is finished and committed."""
            result = invoke(status, [*args, "--json"], kafka_bootstrap)
            if result.exit_code != 0:  # the group may not have joined yet
                return False
            data = json.loads(result.stdout)
            last[:] = [data]
            live = {p["partition"]: p for p in data["live"][0].get("partitions", [])}
            for part in data["partitions"]:
                member = live.get(part["partition"], {})
                if part["pending_count"] != member.get("in_flight", 0) + member.get("waiting", 0):
                    return False
            return bool(data["partitions"][0]["committed"] == 0)

        last: list[object] = []
        try:
            wait_until(settled, "partition 0 held at the slow key, the rest committed")
        except AssertionError:
            raise AssertionError(json.dumps(last, indent=1)) from None
        time.sleep(1.1)  # let the holdup age measurably
        code, data = invoke_json(status, args, kafka_bootstrap)
        assert code == 0
        p0, p1 = sorted(data["partitions"], key=lambda p: p["partition"])
        assert p0["committed"] == offsets[0][0] == 0 and p0["metadata"] == "keyshared"
        assert p0["lag"] == 21 and p0["pending"][0] == [0, 0]
        assert p0["finished_above_cursor"] >= 1
        assert p0["finished_above_cursor"] + p0["pending_count"] == 21
        # Partition 1 shares the workers: keys on the slow key's worker wait there too.
        assert p1["high_watermark"] == 20 and p1["committed"] is not None
        assert p1["lag"] == 20 - p1["committed"]
        assert p1["finished_above_cursor"] + p1["pending_count"] == p1["lag"]
        assert data["info"]["state"] == "stable" and len(data["info"]["members"]) == 1
        [member] = data["info"]["members"]
        assert sorted(map(tuple, member["assignment"])) == [(topic, 0), (topic, 1)]
        assert p0["owner"] == member["client_id"]
        [live] = data["live"]
        assert "error" not in live, live
        lp0 = next(p for p in live["partitions"] if p["partition"] == 0)
        assert lp0["oldest_incomplete_age_seconds"] >= 1.0 and lp0["in_flight"] >= 1
        assert any(entry["key"] == "slow" for entry in lp0["busiest"])

        result = invoke(status, args, kafka_bootstrap)
        assert result.exit_code == 0, result.output
        assert "Oldest incomplete" in result.stdout and "keyshared" in result.stdout
        assert "stable" in result.stdout
    finally:
        gate.set()
    wait_until(lambda: committed_to_end(kafka_bootstrap, group, topic, 2), "everything done")
    run.stop()


def test_status_names_the_holds_on_a_members_dispatch_and_their_age(
    kafka_bootstrap: str, new_topic: TopicFactory, group: str, start: StartConsumer
) -> None:
    """A hold nobody lifts is a member that starts nothing: ``status`` names it, with its age
    and whether the member is ready, read from the member's ``/readyz``."""
    topic = new_topic(partitions=1)
    produce(kafka_bootstrap, topic, [(0, b"k", b"v")])
    run = start(group, topic, lambda record: None, metrics_port=0)
    assert run.consumer.metrics_url
    args = ["-g", group, "-t", topic, "--metrics-url", run.consumer.metrics_url]
    wait_until(lambda: committed_to_end(kafka_bootstrap, group, topic, 1), "the first record")

    def live() -> dict[str, object]:
        code, data = invoke_json(status, args, kafka_bootstrap)
        assert code == 0, data
        [view] = data["live"]
        assert "error" not in view, view
        return dict(view)

    assert live()["holds"] == {}
    assert "Holds on dispatch: none" in invoke(status, args, kafka_bootstrap).stdout
    dispatcher = run.consumer._parts.dispatcher  # as a hold's owner (the session gate) does
    assert dispatcher is not None
    dispatcher.take_hold("zookeeper-connection")
    try:
        wait_until(lambda: live()["holds"].get("zookeeper-connection", 0) >= 1.0,  # type: ignore[attr-defined]
                   "the hold to show, a second old")  # fmt: skip
        text = invoke(status, args, kafka_bootstrap).stdout
        assert "Holds on dispatch: zookeeper-connection (" in text, text
    finally:
        dispatcher.lift_hold("zookeeper-connection")
    assert live()["holds"] == {}
    run.stop()


def test_status_reports_a_parked_key_and_the_dlq_size(
    kafka_bootstrap: str,
    new_topic: TopicFactory,
    group: str,
    start: StartConsumer,
    dlq_for: Callable[[str], str],
) -> None:
    topic = new_topic(partitions=1)
    dlq = dlq_for(topic)

    def handle(record: Record) -> None:
        if record.value == b"poison":
            raise ValueError("cannot handle it")

    records = [(0, b"bad", b"1"), (0, b"bad", b"poison"), (0, b"good", b"x"), (0, b"bad", b"3")]
    offsets = produce(kafka_bootstrap, topic, records)[0]
    run = start(group, topic, handle, poison="park")
    wait_until(lambda: committed_to_end(kafka_bootstrap, group, topic, 1), "the cursor at the end")
    run.stop()

    code, data = invoke_json(status, ["-g", group], kafka_bootstrap)
    assert code == 0
    [row] = data["key_states"]
    assert (row["topic"], row["partition"], row["key"], row["state"]) == (topic, 0, "bad", "parked")
    assert row["offset"] == offsets[1]
    assert data["dlq"] == [
        {"topic": dlq, "source_topic": topic, "exists": True, "records": 2, "by_source": None}
    ]
    assert data["info"]["state"] == "empty" and data["partitions"][0]["done"]

    result = invoke(status, ["-g", group, "-t", topic], kafka_bootstrap)
    assert result.exit_code == 0, result.output
    assert "parked" in result.stdout and "bad" in result.stdout and dlq in result.stdout


def test_status_errors_are_clear_and_bounded(kafka_bootstrap: str, group: str) -> None:
    result = invoke(status, ["-g", group], kafka_bootstrap)
    assert result.exit_code == 2
    assert f"group {group!r} is unknown" in result.output

    began = time.monotonic()
    result = invoke(status, ["-g", group, "-b", "127.0.0.1:1", "--timeout", "2"], kafka_bootstrap)
    assert result.exit_code == 2 and time.monotonic() - began < 10
    assert "127.0.0.1:1 did not answer within 2s" in result.output
