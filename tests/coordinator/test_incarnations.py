"""The topic-incarnation rules (:mod:`coordinator.incarnations`), without servers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.incarnations import (
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
