"""The topic-incarnation rules (:mod:`coordinator.incarnations`), without servers."""

from __future__ import annotations

import json
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.incarnations import (
    MAX_NAMED,
    SETTLE_AFTER_S,
    Incarnation,
    TopicRecord,
    reconcile,
    settled,
    with_commit,
)


def test_a_first_record_adopts_the_cursors_written_before_stamps() -> None:
    record, changes = reconcile(None, "id1", 3, {0: 10, 1: -1, 2: 7})
    assert changes
    assert record.accepts(0, Incarnation())  # unstamped: adopted
    assert record.accepts(0, Incarnation("id1", 0))
    assert record.committed == {0: (10,), 2: (7,)}
    assert not record.added(2) and record.added(3)


def test_a_recreated_topic_drops_every_cursor_of_the_old_one() -> None:
    old, _ = reconcile(None, "id1", 3, {0: 10})
    record, changes = reconcile(old, "id2", 3, {0: -1})
    assert changes
    assert not record.accepts(0, Incarnation())  # unstamped cursors are of the old one too
    assert not record.accepts(0, Incarnation("id1", 0))
    assert record.accepts(0, Incarnation("id2", 0))


def test_every_partition_of_a_recreated_topic_is_read_from_its_start() -> None:
    """Every partition of the new incarnation is new to the group: with nothing committed it
    is read from its start, even with ``auto.offset.reset=latest`` (which would skip what was
    produced to the new topic before a member saw it)."""
    old, _ = reconcile(None, "id1", 3, {0: 10})
    assert not old.added(0)
    record, _ = reconcile(old, "id2", 3, {0: -1})
    assert all(record.added(p) for p in range(3))


def test_the_groups_own_commit_is_never_taken_for_a_reset() -> None:
    record = TopicRecord("id", committed={0: (10,)}, version=3)
    named = with_commit(record, {0: 20}, held={0: 10}, now=0.0)
    # Kafka holds either value, whether the commit landed or not (or its writer died).
    for kafka in (10, 20):
        again, changes = reconcile(named, "id", 1, {0: kafka})
        assert not changes and again.accepts(0, Incarnation("id", 0))


def test_the_groups_first_commit_is_never_taken_for_a_reset_if_it_did_not_land() -> None:
    # Kafka held nothing yet. The leader names its first commit, and the commit fails (the
    # leader was cut off from Kafka, or died): Kafka still holds nothing, which is the group's
    # own state, not an operator's reset. Taken for one, every cursor was dropped and the group
    # redid its topic from the start (tests/partitions/test_kafka_cut.py, issue 27).
    record, _ = reconcile(None, "id", 1, {0: -1})
    named = with_commit(record, {0: 20}, held={0: -1}, now=0.0)
    for kafka in (-1, 20):
        again, changes = reconcile(named, "id", 1, {0: kafka})
        assert not changes and again.accepts(0, Incarnation("id", 0))
    assert settled(named, {0: 20}, now=None).committed == {0: (20,)}


def test_an_offset_reset_while_stopped_drops_that_partitions_cursors_only() -> None:
    record = TopicRecord("id", committed={0: (20, 10), 1: (5,)}, version=3)
    after, changes = reconcile(record, "id", 2, {0: 0, 1: 5})
    assert len(changes) == 1
    assert not after.accepts(0, Incarnation("id", 0)) and after.accepts(0, Incarnation("id", 1))
    assert after.accepts(1, Incarnation("id", 0))
    assert after.committed[0] == (0,)
    # Deleted offsets (kafka-consumer-groups --delete-offsets) are a reset too.
    gone, changes = reconcile(record, "id", 2, {0: 20, 1: -1})
    assert changes and gone.epochs == {1: 1} and 1 not in gone.committed


def test_a_record_round_trips_through_json() -> None:
    record = TopicRecord("id", "id", 4, {1: 2}, {0: (20, 10)}, version=7)
    assert TopicRecord.from_json(record.to_json(), 7) == record


def test_the_older_offset_is_forgotten_only_well_after_the_commit_was_named() -> None:
    named = with_commit(TopicRecord("id", committed={0: (10,)}), {0: 20}, {0: 10}, now=100.0)
    assert settled(named, {0: 20}, now=101.0).committed == {0: (20, 10)}
    assert settled(named, {0: 20}, now=100.0 + SETTLE_AFTER_S).committed == {0: (20,)}
    assert settled(named, {0: 20}, now=None).committed == {0: (20,)}  # the last member leaving
    assert settled(named, {0: 10}, now=None).committed == {0: (20, 10)}  # not landed: keep both
    # Once settled, a reset to the older offset shows.
    _, changes = reconcile(settled(named, {0: 20}, now=None), "id", 1, {0: 10})
    assert changes


def test_what_kafka_was_seen_holding_counts_as_named_when_the_commit_is() -> None:
    """10 was named long ago, but the writer of 20 read Kafka holding it just now: a member
    may have read it there a moment ago too, so it stays as long as 20's naming."""
    old = TopicRecord("id", committed={0: (10,)}, named={0: (0.0,)}, named_at=0.0)
    named = with_commit(old, {0: 20}, {0: 10}, now=1000.0)
    assert named.namings(0) == [(20, 1000.0), (10, 1000.0)]
    assert settled(named, {0: 20}, now=1001.0).committed == {0: (20, 10)}


def test_two_members_committing_at_once_never_read_as_a_reset() -> None:
    """Finding 31 (docs/chaos.md), as it happened on partition 0 of a rolling restart: the
    leader read Kafka holding 11587; a leaving member's final pass read the same, named
    11769 and committed it; the leader then named 11985 beside its stale read. Naming only
    ``[11985, 11587]`` dropped 11769, which Kafka held: the next reader took it for a reset
    (epoch 1), and the leader's landing for another (epoch 2)."""
    record = TopicRecord("id", committed={0: (11587,)}, named={0: (0.0,)}, version=1)
    leaving = with_commit(record, {0: 11769}, held={0: 11587}, now=1.0)
    kafka = 11769  # the leaving member's commit landed
    leader = with_commit(leaving, {0: 11985}, held={0: 11587}, now=2.0)
    assert reconcile(leader, "id", 1, {0: kafka}) == (leader, [])
    kafka = 11985  # the leader's commit landed
    assert reconcile(leader, "id", 1, {0: kafka}) == (leader, [])
    # Settled well after, only what Kafka holds is left: a reset to 11769 would show.
    assert settled(leader, {0: kafka}, now=2.0 + SETTLE_AFTER_S).committed == {0: (11985,)}


def test_a_record_written_before_per_offset_times_reads_them_as_its_last_naming() -> None:
    legacy = json.dumps({"topic_id": "id", "committed": {"0": [20, 10]}, "named_at": 5.0})
    record = TopicRecord.from_json(legacy.encode(), 3)
    assert record.namings(0) == [(20, 5.0), (10, 5.0)]
    assert TopicRecord.from_json(record.to_json(), 3) == record


@dataclass
class _Writer:
    """One member's low-watermark pass in the schedule below."""

    read: tuple[int, float] | None = None  # what Kafka held, and when it was read
    naming: tuple[int, float] | None = None  # the offset named and when, not yet landed


_STALE_READ_S = 2.0  # a member redoes a read of Kafka and the record slower than this
_NAMES_WITHIN_S = 10.0  # the pass names nothing from an older read of Kafka
_LANDS_WITHIN_S = 32.0  # 10 s to send it, three sends of 5 s, a 6 s wait for the coordinator


@settings(max_examples=500, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["read", "name", "land", "fail", "settle"]),
            st.integers(0, 2),  # which writer
            st.integers(0, 12),  # the offset to name
            st.one_of(  # time passing before the step: mostly within a read's staleness
                st.just(0.0), st.floats(0.0, _STALE_READ_S), st.floats(0.0, SETTLE_AFTER_S / 4)
            ),
        ),
        max_size=40,
    )
)
def test_any_schedule_of_overlapping_commits_leaves_kafka_holding_a_named_offset(
    steps: list[tuple[str, int, int, float]],
) -> None:
    """Three writers read Kafka, name commits, land or fail them and settle the record in any
    order, within the bounds the low-watermark pass keeps (a read names nothing after
    ``_NAMES_WITHIN_S``; a commit lands or fails within ``_LANDS_WITHIN_S`` of its naming). A member
    reading Kafka first and the record up to ``_STALE_READ_S`` later never finds Kafka's
    offset missing from the record: the group's own commits are never taken for a reset."""
    now, kafka = 0.0, 0
    record = TopicRecord("id", committed={0: (0,)}, named={0: (0.0,)})
    writers = [_Writer() for _ in range(3)]
    history: list[tuple[float, int]] = [(now, kafka)]  # when Kafka held what
    for action, which, offset, elapsed in steps:
        writer = writers[which]
        # A commit on its way lands or fails within its bound: time cannot pass it by.
        due = [w.naming[1] + _LANDS_WITHIN_S for w in writers if w.naming is not None]
        now = min(now + elapsed, *due) if due else now + elapsed
        if action == "read":
            writer.read = (kafka, now)
        elif action == "name":
            if writer.read is None or writer.naming is not None:
                continue
            if now - writer.read[1] > _NAMES_WITHIN_S:
                writer.read = None  # outlived its use: the pass names nothing
                continue
            record = with_commit(record, {0: offset}, {0: writer.read[0]}, now)
            writer.naming, writer.read = (offset, now), None
        elif action in ("land", "fail") and writer.naming is not None:
            if action == "land":
                kafka = writer.naming[0]
            writer.naming = None
        elif action == "settle":  # from a read of Kafka up to _STALE_READ_S old, judged then
            recent = [(at, held) for at, held in history if now - at <= _STALE_READ_S]
            seen_at, held = recent[offset % len(recent)] if recent else (now, kafka)
            record = settled(record, {0: held}, seen_at)
        history.append((now, kafka))
        for at, held in history:
            if now - at <= _STALE_READ_S:
                _, changes = reconcile(record, "id", 1, {0: held})
                assert not changes, (at, held, now, record.namings(0))
    # Once every commit has landed or failed and the namings are old, an operator's reset to
    # any other offset the group named shows.
    now += SETTLE_AFTER_S + 1.0
    final = settled(record, {0: kafka}, now)
    assert final.committed[0] == (kafka,)
    for other in set(record.committed[0]) - {kafka}:
        assert reconcile(final, "id", 1, {0: other})[1]


def test_the_offsets_named_are_bounded_and_keep_what_kafka_was_seen_holding() -> None:
    """Commits that keep failing are each named first: past ``MAX_NAMED`` the oldest go, but
    never the offset Kafka holds (a reader would take it for a reset), nor one named so
    recently that its commit may still be on its way (many members' final passes at once)."""
    record = TopicRecord("id", committed={0: (7,)}, named={0: (0.0,)})
    for i in range(3 * MAX_NAMED):  # one failed pass every 5 s
        record = with_commit(record, {0: 100 + i}, held={0: 7}, now=5.0 * i)
    assert len(record.committed[0]) == MAX_NAMED + 1
    assert record.committed[0][0] == 100 + 3 * MAX_NAMED - 1 and 7 in record.committed[0]
    assert not reconcile(record, "id", 1, {0: 7})[1]
    burst = TopicRecord("id", committed={0: (7,)}, named={0: (0.0,)})
    for i in range(2 * MAX_NAMED):  # as many passes in 6 s: every commit may be on its way
        burst = with_commit(burst, {0: 100 + i}, held={0: 7}, now=0.1 * i)
    assert set(burst.committed[0]) == {7, *range(100, 100 + 2 * MAX_NAMED)}


def test_an_offset_that_expired_under_a_running_group_is_no_reset() -> None:
    """Kafka expires the offsets of a group it sees without members (members only assign)
    ``offsets.retention.minutes`` after their commit, even while the group runs. Taken for a
    reset, a quiet partition lost every cursor and the next re-read replayed it."""
    record = TopicRecord("id", committed={0: (20,), 1: (5,)}, version=3)
    kept, changes = reconcile(record, "id", 2, {0: -1, 1: 5}, running={0, 1})
    assert not changes and kept == record and kept.accepts(0, Incarnation("id", 0))
    # A group that was stopped meanwhile: --delete-offsets, still a reset (as before).
    gone, changes = reconcile(record, "id", 2, {0: -1, 1: 5})
    assert changes and gone.epochs == {0: 1}
    # An explicit offset that is not the group's is a reset, running or not.
    moved, changes = reconcile(record, "id", 2, {0: 7, 1: 5}, running={0, 1})
    assert changes and moved.epochs == {0: 1} and moved.committed[0] == (7,)


_offsets = st.integers(min_value=-1, max_value=30)


@given(
    named=st.dictionaries(st.integers(0, 3), st.lists(_offsets, min_size=1, max_size=2)),
    kafka=st.dictionaries(st.integers(0, 3), _offsets),
    running=st.sets(st.integers(0, 3)),
)
def test_running_only_spares_missing_offsets_of_running_partitions(
    named: dict[int, list[int]], kafka: dict[int, int], running: set[int]
) -> None:
    record = TopicRecord("id", committed={p: tuple(o) for p, o in named.items()}, version=1)
    stopped, _ = reconcile(record, "id", 4, kafka)
    ran, _ = reconcile(record, "id", 4, kafka, running)
    for partition in range(4):
        spared = partition in running and kafka.get(partition, 0) < 0
        if spared:  # an expiry: the cursors keep counting, the record is left as it was
            assert ran.epochs.get(partition, 0) == 0
            assert ran.committed.get(partition) == record.committed.get(partition)
        else:  # everything else is judged exactly as for a stopped group
            assert ran.epochs.get(partition, 0) == stopped.epochs.get(partition, 0)
            assert ran.committed.get(partition) == stopped.committed.get(partition)
