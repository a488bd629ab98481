"""Cursor arithmetic of key_shared members (no server): what a range's cursor may be."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshared.core.claims import PartitionClaims, StoredCursor
from keyshared.core.offsets import decode_finished
from keyshared.core.slots import SlotRange
from keyshared.modes.range_cursors import (
    CURSOR_METADATA_BYTES,
    RANGE_METADATA_BYTES,
    cursors_for,
    metadata_budget,
)

LOW, HIGH = SlotRange(0, 32767), SlotRange(32768, 65535)

Written = list[tuple[SlotRange, int, str]] | None


def whole(slots: SlotRange, written: Written) -> tuple[int, str]:
    """The one cursor written for all of ``slots``."""
    assert written is not None and len(written) == 1 and written[0][0] == slots, written
    return written[0][1], written[0][2]


def covered(written: Written, slot: int) -> set[int]:
    """The offsets the cursor covering ``slot`` says are done (below it or in its metadata)."""
    assert written is not None
    for slots, offset, metadata in written:
        if slots.lo <= slot <= slots.hi:
            return set(range(offset)) | decode_finished(offset, metadata)
    raise AssertionError(f"no cursor written for slot {slot}: {written}")


def test_a_range_just_granted_gets_no_cursor_from_a_window_that_does_not_read_it() -> None:
    """Found by the join/leave/crash test: a member flushed a just-granted range with its own
    window's (far lower) cursor before re-reading, and the range's next owner redid records."""
    claims = PartitionClaims.resolve([(LOW, 1)], [StoredCursor(LOW, 100, 1)], base=0)
    assert cursors_for(HIGH, claims, window_cursor=100, finished=[], seen_end=100) is None
    assert cursors_for(HIGH, None, window_cursor=100, finished=[], seen_end=100) is None


def test_a_freshly_read_range_never_moves_back_below_its_resume_point() -> None:
    stored = [StoredCursor(LOW, 100, 1), StoredCursor(HIGH, 5000, 2, {5003})]
    claims = PartitionClaims.resolve([(LOW, 3), (HIGH, 4)], stored, base=0)
    assert claims.start == 100  # the window starts low, for the low range
    written = cursors_for(HIGH, claims, window_cursor=120, finished=[121], seen_end=122)
    offset, metadata = whole(HIGH, written)
    assert offset == 5000
    assert decode_finished(offset, metadata) == {5003}
    written = cursors_for(LOW, claims, window_cursor=120, finished=[121], seen_end=122)
    assert whole(LOW, written) == (120, metadata_of(120, [121]))


def metadata_of(cursor: int, finished: list[int]) -> str:
    from keyshared.core.offsets import encode_finished

    return encode_finished(cursor, finished, 60_000) or ""


def test_finished_offsets_of_a_narrower_cursor_never_spread_to_the_rest_of_a_wider_range() -> None:
    """A wrote LOW's cursor with offset 500 "finished": a record of the upper slots that A did
    not own and skipped. B, holding the whole space, must not write 500 as finished for it,
    or the next holder of HIGH would skip a record nobody ran."""
    space = SlotRange(0, 65535)
    stored = [StoredCursor(LOW, 400, 2, {500}), StoredCursor(HIGH, 400, 1)]
    claims = PartitionClaims.resolve([(space, 3)], stored, base=0)
    for seen_end in (450, 600):  # before the window read 500 (one cursor per piece), after
        written = cursors_for(space, claims, window_cursor=400, finished=[], seen_end=seen_end)
        assert 500 not in covered(written, HIGH.lo), "a skipped record was carried as done"
        assert 500 in covered(written, LOW.lo) or seen_end > 500, "LOW's finished 500 undone"


def test_a_finished_record_at_the_resume_point_is_not_redone() -> None:
    """Found by the chaos run: a member resumed HIGH at 5000, finished 5000 and 5003, and wrote
    the cursor 5000 with 5003 finished. The metadata holds offsets strictly above the cursor,
    so 5000 was dropped and HIGH's next owner ran it again (one record, the resume point)."""
    stored = [StoredCursor(LOW, 100, 1), StoredCursor(HIGH, 5000, 2)]
    claims = PartitionClaims.resolve([(LOW, 3), (HIGH, 4)], stored, base=0)
    written = cursors_for(
        HIGH, claims, window_cursor=120, finished=[5000, 5001, 5003], seen_end=5004
    )
    offset, metadata = whole(HIGH, written)
    done = set(range(offset)) | decode_finished(offset, metadata)
    assert {5000, 5001, 5003} <= done, (
        f"cursor {offset}, finished {sorted(done - set(range(offset)))}"
    )
    assert 5002 not in done and offset <= 5002, "an unfinished record was skipped"


def test_unchanged_cursors_are_not_decoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A member's re-read decodes only the cursors that changed since its last read: decoding
    one that carries thousands of finished offsets takes tens of milliseconds, and re-reads
    come with every plan change."""
    from coordinator.cursors import Cursor
    from keyshared.modes import range_cursors

    calls: list[int] = []
    real = range_cursors.decode_finished

    def counting(offset: int, metadata: str | None) -> frozenset[int]:
        calls.append(offset)
        return real(offset, metadata)

    monkeypatch.setattr(range_cursors, "decode_finished", counting)
    a = Cursor(LOW, "t", 0, 100, metadata_of(100, [103]), "m", 1)
    b = Cursor(HIGH, "t", 0, 200, metadata_of(200, [205]), "m", 2)
    first: range_cursors.Decoded = {}
    range_cursors.stored_cursors([a, b], None, first)
    assert sorted(calls) == [100, 200]
    moved = Cursor(HIGH, "t", 0, 210, metadata_of(210, [215]), "m", 2)
    second: range_cursors.Decoded = {}
    stored = range_cursors.stored_cursors([a, moved], first, second)
    assert sorted(calls) == [100, 200, 210], "only the cursor that moved is decoded again"
    by_slots = {c.slots: c.finished for c in stored[("t", 0)]}
    assert by_slots == {LOW: {103}, HIGH: {215}}
    assert set(second) == {(LOW, "t", 0), (HIGH, "t", 0)}


def test_a_range_only_partly_read_by_the_window_gets_no_cursor() -> None:
    """Found by the 30-minute chaos run: the member held LOW and was granted the whole space.
    Its window, built for LOW only, counted HIGH's records as finished (not its own); the
    cursor written for the whole space from it made the next owner skip HIGH's records."""
    space = SlotRange(0, 65535)
    claims = PartitionClaims.resolve([(LOW, 1)], [StoredCursor(LOW, 100, 1)], base=0)
    assert cursors_for(space, claims, window_cursor=150, finished=[151, 152], seen_end=153) is None
    assert cursors_for(LOW, claims, window_cursor=150, finished=[151], seen_end=152) is not None


def test_a_grown_range_is_written_piece_by_piece_until_its_window_has_read_past_them() -> None:
    """Found by the 30-minute chaos run: a member held 0-14200 (its cursor at 17635) and the
    plan grew it to 0-14201, whose extra slot resumed at 17610. Right after the re-read the
    member wrote the grown range's cursor at 17610 with nothing finished (its window had read
    nothing yet); that cursor, the newest, then hid 0-14200's own, and the next re-read ran
    25 records of 0-14200 again."""
    held, extra, grown = SlotRange(0, 14200), SlotRange(14201, 14201), SlotRange(0, 14201)
    stored = [StoredCursor(held, 17635, 297, {17640}), StoredCursor(extra, 17610, 200)]
    claims = PartitionClaims.resolve([(grown, 308)], stored, base=0)
    assert claims.start == 17610
    # Nothing read yet: one cursor per piece, each where it stands.
    written = cursors_for(grown, claims, window_cursor=17610, finished=[], seen_end=17610)
    assert written is not None and len(written) == 2, written
    assert {17634, 17640} <= covered(written, 0) and 17635 not in covered(written, 0)
    assert 17610 not in covered(written, 14201)
    # The extra slot's 17611 running, 17612 finished, 17640 not read yet: still per piece.
    written = cursors_for(grown, claims, 17611, [17612], seen_end=17640)
    assert written is not None and len(written) == 2
    assert 17640 in covered(written, 0) and 17612 in covered(written, 14201)
    # Read past everything the pieces know: the window's own account is complete, and one
    # cursor says it all. 17620 (the extra slot's) is still running.
    finished = [o for o in range(17612, 17650) if o != 17620]
    offset, metadata = whole(grown, cursors_for(grown, claims, 17611, finished, seen_end=17650))
    done = set(range(offset)) | decode_finished(offset, metadata)
    assert 17620 not in done and 17611 not in done
    assert set(range(17612, 17650)) - {17620} <= done


@st.composite
def _partitions(draw: st.DrawFn) -> tuple[list[int], list[StoredCursor], int, int, set[int]]:
    """A partition's records (their slots), the stored cursors of the pieces a held range is
    made of, and a window that has taken in some of the records and finished some of them."""
    size = draw(st.integers(1, 60))
    slots = draw(st.lists(st.integers(0, 7), min_size=size, max_size=size))  # 0-5 held, 6-7 not
    cuts = sorted(draw(st.sets(st.integers(1, 5), max_size=3)))
    bounds = [0, *cuts, 6]
    stored = []
    for token, (lo, nxt) in enumerate(pairwise(bounds), start=1):
        start = draw(st.integers(0, size))
        own_above = [o for o in range(start, size) if lo <= slots[o] < nxt]
        finished = draw(st.sets(st.sampled_from(own_above))) if own_above else set()
        stored.append(StoredCursor(SlotRange(lo, nxt - 1), start, token, finished))
    seen_end = draw(st.integers(0, size))
    ran = draw(st.sets(st.integers(0, size - 1)))
    return slots, stored, seen_end, size, ran


@settings(max_examples=400, deadline=None)
@given(_partitions())
def test_range_cursors_never_skip_an_undone_record_nor_undo_a_done_one(
    case: tuple[list[int], list[StoredCursor], int, int, set[int]],
) -> None:
    """Whatever the pieces a range is made of and however far its window has read, the
    cursors written for it cover exactly what is done: records its pieces knew to be done and
    records the window finished. Anything less replays; anything more loses."""
    slots, stored, seen_end, size, ran = case
    held = SlotRange(0, 5)
    claims = PartitionClaims.resolve([(held, 99)], stored, base=0)
    start = claims.start or 0

    def done_before(offset: int) -> bool:
        return claims.is_done(slots[offset], offset)

    def window_done(offset: int) -> bool:  # as the window sees it: not its own, or finished
        return not claims.accepts(slots[offset], offset) or offset in ran

    taken = range(start, max(start, seen_end))
    cursor = next((o for o in taken if not window_done(o)), max(start, seen_end))
    finished = [o for o in taken if o > cursor and window_done(o)]
    written = cursors_for(held, claims, cursor, finished, max(start, seen_end))
    assert written is not None, "the window reads every piece of the range"
    for o in range(size):
        if slots[o] > 5:
            continue
        truly_done = done_before(o) or (o in taken and o in ran)
        if o in covered(written, slots[o]):
            assert truly_done, f"offset {o} (slot {slots[o]}) would be skipped, never run"
        else:
            assert not truly_done, f"offset {o} (slot {slots[o]}) would run again"


@given(st.integers(min_value=1, max_value=1_500))
def test_a_ranges_metadata_in_one_flush_fits_one_zookeeper_request(partitions: int) -> None:
    """Shared out per partition, never past a cursor's own bound, never below a few runs."""
    budget = metadata_budget(partitions)
    assert 256 <= budget <= CURSOR_METADATA_BYTES
    assert budget * partitions <= RANGE_METADATA_BYTES
