"""Cursor arithmetic of key_shared members (no server): what a range's cursor may be."""

from __future__ import annotations

import pytest

from coordinator.plug.range_cursors import range_cursor
from keyshared.core.claims import PartitionClaims, StoredCursor
from keyshared.core.offsets import decode_finished
from keyshared.core.slots import SlotRange

pytestmark = pytest.mark.unit

LOW, HIGH = SlotRange(0, 32767), SlotRange(32768, 65535)


def test_a_range_just_granted_gets_no_cursor_from_a_window_that_does_not_read_it() -> None:
    """Found by the join/leave/crash test: a member flushed a just-granted range with its own
    window's (far lower) cursor before re-reading, and the range's next owner redid records."""
    claims = PartitionClaims.resolve([(LOW, 1)], [StoredCursor(LOW, 100, 1)], base=0)
    assert range_cursor(HIGH, claims, window_cursor=100, finished=[]) is None
    assert range_cursor(HIGH, None, window_cursor=100, finished=[]) is None


def test_a_freshly_read_range_never_moves_back_below_its_resume_point() -> None:
    stored = [StoredCursor(LOW, 100, 1), StoredCursor(HIGH, 5000, 2, {5003})]
    claims = PartitionClaims.resolve([(LOW, 3), (HIGH, 4)], stored, base=0)
    assert claims.start == 100  # the window starts low, for the low range
    offset, metadata = range_cursor(HIGH, claims, window_cursor=120, finished=[121])
    assert offset == 5000
    assert decode_finished(offset, metadata) == {5003}
    assert range_cursor(LOW, claims, window_cursor=120, finished=[121]) == (
        120,
        metadata_of(120, [121]),
    )


def metadata_of(cursor: int, finished: list[int]) -> str:
    from keyshared.core.offsets import encode_finished

    return encode_finished(cursor, finished, 60_000) or ""


def test_finished_offsets_of_a_narrower_cursor_never_spread_to_the_rest_of_a_wider_range() -> None:
    """A wrote LOW's cursor with offset 500 "finished": a record of the upper slots that A did
    not own and skipped. B, holding the whole space, must not write 500 as finished for it,
    or the next holder of HIGH would skip a record nobody ran."""
    whole = SlotRange(0, 65535)
    stored = [StoredCursor(LOW, 400, 2, {500}), StoredCursor(HIGH, 400, 1)]
    claims = PartitionClaims.resolve([(whole, 3)], stored, base=0)
    computed = range_cursor(whole, claims, window_cursor=400, finished=[])
    assert computed is not None
    offset, metadata = computed
    assert 500 not in decode_finished(offset, metadata), "a skipped record was carried as done"


def test_a_finished_record_at_the_resume_point_is_not_redone() -> None:
    """Found by the chaos run: a member resumed HIGH at 5000, finished 5000 and 5003, and wrote
    the cursor 5000 with 5003 finished. The metadata holds offsets strictly above the cursor,
    so 5000 was dropped and HIGH's next owner ran it again (one record, the resume point)."""
    stored = [StoredCursor(LOW, 100, 1), StoredCursor(HIGH, 5000, 2)]
    claims = PartitionClaims.resolve([(LOW, 3), (HIGH, 4)], stored, base=0)
    computed = range_cursor(HIGH, claims, window_cursor=120, finished=[5000, 5001, 5003])
    assert computed is not None
    offset, metadata = computed
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
    from coordinator.plug import range_cursors

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
    whole = SlotRange(0, 65535)
    claims = PartitionClaims.resolve([(LOW, 1)], [StoredCursor(LOW, 100, 1)], base=0)
    assert range_cursor(whole, claims, window_cursor=150, finished=[151, 152]) is None
    assert range_cursor(LOW, claims, window_cursor=150, finished=[151]) is not None
