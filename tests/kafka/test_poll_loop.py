"""The poll loop against a scripted consumer: shutdown, revoke, loss and commit interleavings.

No broker: :class:`FakeConsumer` serves assignments, records and commit outcomes exactly when
the script says, and the test finishes records by hand. The real-broker tests
(``test_consumer_*``, ``test_rebalance_protocols``) prove the same paths end to end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

from keyshared.kafka.seams import PollInbox
from keyshared.runtime.partition import PartitionPhase
from keyshared.runtime.settlement import SettlementBuffer
from keyshared.settings import ConsumerOptions
from tests.kafka.support.fake_consumer import records
from tests.kafka.support.loop_harness import LoopHarness

T0, T1 = ("t", 0), ("t", 1)


def keyed(partition: int, offsets: range, key: bytes = b"k") -> list[object]:
    """Records of ``t[partition]`` with a distinct key per offset (all may run at once)."""
    return records("t", partition, [(o, key + b"%d" % o) for o in offsets])


def test_shutdown_never_commits_past_records_delivered_while_draining() -> None:
    """Records fetched while the loop drains for a stop are not processed: the final commit
    must stay below them, so the next owner gets them (issue 10, item 1)."""
    h = LoopHarness()
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(keyed(0, range(0, 1)))  # offset 0 in flight
    h.fake.then(h.stop.set)
    # While the shutdown drains: records 1..4 arrive anyway (fetched before the pause) ...
    h.fake.then_deliver(keyed(0, range(1, 5)))
    # ... then the in-flight record finishes and the drain completes.
    h.fake.then(lambda: h.finish(0))
    h.run()
    assert h.committed(0) == 1, "the commit passed records 1..4, which nobody processed"


def test_partition_assigned_during_shutdown_commits_no_further_than_its_committed_offset() -> None:
    h = LoopHarness()
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(keyed(0, range(0, 1)))
    h.fake.then(h.stop.set)
    h.fake.then_assign(T1, committed={T1: (5, "")})  # arrives while stopping: draining at once
    h.fake.then_deliver(keyed(1, range(5, 10)))  # delivered, never dispatched
    h.fake.then(lambda: h.finish(0))
    h.run()
    assert h.committed(0) == 1
    assert h.committed(1) in (None, 5), "t[1] was committed past records it never processed"
    assert h.offsets() == [], "a record of a partition assigned while stopping was dispatched"


def _held_success(h: LoopHarness, then_stop: Callable[[LoopHarness], object]) -> None:
    """One success buffered on a thread that went on to run another key's slow handler.

    The loop's own between-polls flush is kept off while the partition is ACTIVE, so the only
    flush that can settle the success is the one a drain's tick gives (without that gate, a
    loop iteration slower than the flush age settled it first and the test passed without the
    fix: 1 run in 10, found by mutation testing).
    """
    settlements = SettlementBuffer(h.dispatcher.finish_many)
    buffered, release_thread = threading.Event(), threading.Event()
    taken: list[Any] = []

    def worker_thread() -> None:
        state, entry = h.take(0)
        taken.append(state)
        settlements.add(state, entry, 0.001)  # one success: below the batch size, kept
        buffered.set()
        release_thread.wait(30)  # "running another key's slow handler"

    h.nudge = lambda: (
        settlements.flush_stale() if taken and taken[0].phase is not PartitionPhase.ACTIVE else None
    )
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(keyed(0, range(0, 1)))
    h.fake.then(lambda: threading.Thread(target=worker_thread, daemon=True).start())
    h.fake.then(lambda: buffered.wait(10))
    then_stop(h)
    try:
        h.run()
    finally:
        release_thread.set()


def test_revoke_drain_settles_successes_held_by_a_busy_thread() -> None:
    """A held success must not hold the revoke until ``drain_timeout`` (issue 10, item 3)."""
    h = LoopHarness(options=ConsumerOptions(drain_timeout=3.0))
    _held_success(h, lambda h: (h.fake.then_revoke(T0), h.fake.then(h.stop.set)))
    assert h.committed(0) == 1, "the revoke committed below a record that had succeeded"


def test_shutdown_drain_settles_successes_held_by_a_busy_thread() -> None:
    h = LoopHarness(options=ConsumerOptions(drain_timeout=3.0))
    _held_success(h, lambda h: h.fake.then(h.stop.set))
    assert h.committed(0) == 1, "the shutdown committed below a record that had succeeded"


def test_partition_assigned_during_shutdown_is_paused() -> None:
    """Pause before giving records back: a partition that arrives while stopping fetches
    nothing more (its records would only be given back)."""
    h = LoopHarness()
    seen: list[set[tuple[str, int]]] = []
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(keyed(0, range(0, 1)))
    h.fake.then(h.stop.set)
    h.fake.then_assign(T1, committed={T1: (5, "")})
    h.fake.then(lambda: seen.append(set(h.fake.paused)))
    h.fake.then(lambda: h.finish(0))
    h.run()
    assert seen and T1 in seen[0], f"t[1] assigned while stopping was not paused: {seen}"


def test_refused_async_commit_is_resent_and_shutdown_commit_is_synchronous() -> None:
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01))
    h.fake.refuse_commits = KafkaError.ILLEGAL_GENERATION
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(keyed(0, range(0, 3)))
    h.fake.then(lambda: [h.finish(o) for o in range(3)])
    h.fake.then_wait_for(lambda: any(c.refused for c in h.fake.commits))
    h.fake.then(lambda: setattr(h.fake, "refuse_commits", None))
    h.fake.then_wait_for(lambda: h.committed(0) == 3)  # the refused commit was sent again
    h.fake.then(h.stop.set)
    h.run()
    refused = [c for c in h.fake.commits if c.refused]
    assert refused and all(c.asynchronous for c in refused)
    assert h.committed(0) == 3
    assert not h.fake.commits[-1].asynchronous, "the final commit must be synchronous"


def test_lost_partition_is_never_committed() -> None:
    h = LoopHarness()
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(keyed(0, range(0, 2)))
    h.fake.then_lose(T0)
    h.fake.then(lambda: h.finish(0))  # a late result of the lost incarnation
    h.fake.then(h.stop.set)
    h.run()
    assert h.fake.commits == [] or all(c.offsets == [] for c in h.fake.commits)
    assert h.committed(0) == 0, "a lost partition's late result reached a commit"


def test_offsets_never_delivered_do_not_stall_the_cursor() -> None:
    """Transaction markers: the position passes offsets that never reach the application."""
    h = LoopHarness()
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(records("t", 0, [(0, b"a"), (2, b"b")]))  # 1 is a marker
    h.fake.then(lambda: [h.finish(o) for o in (0, 2)])
    h.fake.then(lambda: h.fake.positions.__setitem__(T0, 4))  # 3 is the closing marker
    h.fake.then(h.stop.set)
    h.run()
    assert h.committed(0) == 4


def test_the_loop_serves_the_inbox_it_was_given_even_while_it_is_empty() -> None:
    """An empty inbox is falsy (it has a length): ``inbox or PollInbox()`` once replaced the
    coordinator's inbox with a private one, and nothing posted to it ever ran."""
    inbox = PollInbox()
    h = LoopHarness(inbox=inbox)
    ran = threading.Event()
    h.fake.then(lambda: inbox.post(ran.set))
    h.fake.then_wait_for(ran.is_set)
    h.fake.then(h.stop.set)
    h.run()
    assert ran.is_set()


def test_a_stale_position_after_a_reassignment_never_moves_the_cursor() -> None:
    """Right after a partition is assigned again at a lower offset (a key_shared member
    re-reading from its ranges' cursors), librdkafka's ``position()`` still reports where the
    previous fetch stood (``test_consumer_offsets`` shows it on the real broker). The loop
    once took it for offsets skipped by transaction markers: the window's cursor jumped past
    records never run, and the member crashed when they arrived (the 30-minute chaos run
    lost 3,313 records so)."""
    h = LoopHarness(options=ConsumerOptions(commit_interval=0.01))
    observed: list[int] = []
    observe = h.loop._observe_positions

    def counting() -> None:
        observe()
        observed.append(1)

    h.loop._observe_positions = counting  # type: ignore[method-assign]
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(keyed(0, range(0, 10)))
    h.fake.then(lambda: [h.finish(o) for o in range(10)])
    h.fake.then_revoke(T0)
    h.fake.then_assign(T0, committed={T0: (5, "")})  # re-read from an older cursor
    reassigned_at: list[int] = []
    h.fake.then(lambda: (observed.clear(), reassigned_at.append(len(h.fake.commits))))
    h.fake.then_wait_for(lambda: len(observed) >= 3)  # the position (10) is observed, stale
    h.fake.then(lambda: h.loop.committer.commit_async(h.loop.states.values()))
    h.fake.then(lambda: reassigned_at.append(len(h.fake.commits)))
    h.fake.then_deliver(keyed(0, range(5, 10)))
    h.fake.then(lambda: [h.finish(o) for o in range(5, 10)])
    h.fake.then(h.stop.set)
    h.run()
    assert h.committed(0) == 10  # 5-9 ran again (finish() fails for a record not dispatched)
    before_redelivery = h.fake.commits[reassigned_at[0] : reassigned_at[1]]
    assert all(offset <= 5 for c in before_redelivery for _, _, offset, _ in c.offsets)


def test_a_full_window_pauses_and_its_resume_wakes_the_fetcher() -> None:
    """Backpressure counts unfinished records; a resume is followed at once by a request to
    the partition's leader (a watermark query), because librdkafka's broker thread otherwise
    notices a resumed partition only when it next wakes up, up to a second later."""
    h = LoopHarness(ConsumerOptions(max_window=5))
    h.fake.then_assign(T0, committed={T0: (0, "")})
    h.fake.then_deliver(keyed(0, range(0, 5)))  # five unfinished records: the window is full
    paused: list[set[tuple[str, int]]] = []
    h.fake.then(lambda: paused.append(set(h.fake.paused)))
    h.fake.then(lambda: [h.finish(offset) for offset in range(5)])
    h.fake.then(lambda: paused.append(set(h.fake.paused)))
    h.fake.then(h.stop.set)
    h.run()
    assert paused == [{T0}, set()], paused
    assert T0 in h.fake.watermark_queries, "the resume did not wake librdkafka's fetcher"
