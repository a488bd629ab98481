"""Claims: the resume point of every held slot is the latest holder's cursor, never an older one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keyshared.core.claims import PartitionClaims, StoredCursor, superseded
from keyshared.core.slots import MAX_SLOT, SlotRange

slot = st.integers(0, MAX_SLOT)


@st.composite
def ranges(draw: st.DrawFn) -> SlotRange:
    a, b = draw(slot), draw(slot)
    return SlotRange(min(a, b), max(a, b))


@st.composite
def cursors(draw: st.DrawFn) -> list[StoredCursor]:
    count = draw(st.integers(0, 6))
    tokens = draw(st.lists(st.integers(0, 1000), min_size=count, max_size=count, unique=True))
    return [
        StoredCursor(
            draw(ranges()),
            draw(st.integers(0, 10_000)),
            token,
            frozenset(draw(st.sets(st.integers(0, 12_000), max_size=5))),
        )
        for token in tokens
    ]


def latest_covering(stored: list[StoredCursor], at: int) -> StoredCursor | None:
    covering = [c for c in stored if c.slots.lo <= at <= c.slots.hi]
    return max(covering, key=lambda c: c.token, default=None)


@given(held=ranges(), stored=cursors(), probes=st.lists(slot, min_size=1, max_size=20))
def test_every_held_slot_resumes_at_its_latest_cursor(
    held: SlotRange, stored: list[StoredCursor], probes: list[int]
) -> None:
    claims = PartitionClaims.resolve([(held, 99)], stored, base=42)
    for probe in [held.lo, held.hi, *probes]:
        if not held.lo <= probe <= held.hi:
            assert not claims.holds(probe)
            assert not claims.accepts(probe, 10**9)
            continue
        cover = latest_covering(stored, probe)
        start = 42 if cover is None else cover.offset
        finished = frozenset() if cover is None else cover.finished
        assert claims.token_of(probe) == 99
        for offset in (start - 1, start, start + 1, *finished):
            expected_done = offset < start or offset in finished
            assert claims.is_done(probe, offset) is expected_done
            assert claims.accepts(probe, offset) is not expected_done


@given(held=st.lists(ranges(), min_size=1, max_size=4), stored=cursors())
def test_start_is_the_lowest_resume_point_so_no_held_record_is_missed(
    held: list[SlotRange], stored: list[StoredCursor]
) -> None:
    disjoint: list[SlotRange] = []
    for candidate in sorted(held):
        if not disjoint or candidate.lo > disjoint[-1].hi:
            disjoint.append(candidate)
    claims = PartitionClaims.resolve([(r, i) for i, r in enumerate(disjoint)], stored, base=7)
    assert claims.start == min(piece.start for piece in claims.pieces)
    covered = sum(piece.slots.hi - piece.slots.lo + 1 for piece in claims.pieces)
    assert covered == sum(r.hi - r.lo + 1 for r in disjoint), "pieces must tile the held slots"


def test_a_reshaped_range_does_not_fall_back_to_a_stale_wider_cursor() -> None:
    """0-65535 was last written at 600 (token 1); the upper half moved on to 9000 (token 4)."""
    stored = [
        StoredCursor(SlotRange(0, 65535), 600, 1),
        StoredCursor(SlotRange(32768, 65535), 9000, 4),
    ]
    claims = PartitionClaims.resolve([(SlotRange(32768, 65535), 5)], stored, base=0)
    assert claims.start == 9000


def test_nothing_held() -> None:
    claims = PartitionClaims.resolve([], [], base=0)
    assert claims.start is None
    assert not claims.accepts(5, 5)
    with pytest.raises(KeyError, match="slot 5 is not held"):
        claims.is_done(5, 5)


@st.composite
def cursor_history(draw: st.DrawFn) -> list[StoredCursor]:
    """Cursors as a group piles them up: leases (tokens) in turn, each writing its range whole
    or piece by piece (one transaction: one version) several times."""
    stored: list[StoredCursor] = []
    version = 0
    for token in range(draw(st.integers(1, 8))):
        held = draw(ranges())
        for _write in range(draw(st.integers(1, 3))):
            version += 1
            cut = draw(st.integers(held.lo, held.hi))
            pieces = (
                [held]
                if cut == held.lo or not draw(st.booleans())
                else [SlotRange(held.lo, cut - 1), SlotRange(cut, held.hi)]
            )
            stored += [
                StoredCursor(piece, draw(st.integers(0, 100)), token, frozenset(), version)
                for piece in pieces
            ]
    return draw(st.permutations(stored))


@given(cursor_history(), st.lists(ranges(), min_size=1, max_size=3))
def test_collecting_superseded_cursors_changes_no_resolution(
    stored: list[StoredCursor], held: list[SlotRange]
) -> None:
    dead = set(superseded(stored))
    kept = [c for i, c in enumerate(stored) if i not in dead]
    pairs = [(slots, 99) for slots in held]
    before = PartitionClaims.resolve(pairs, stored, base=-1)
    after = PartitionClaims.resolve(pairs, kept, base=-1)
    assert [(p.slots, p.start, p.source) for p in after.pieces] == [
        (p.slots, p.start, p.source) for p in before.pieces
    ]
    everything = PartitionClaims.resolve([(SlotRange(0, MAX_SLOT), 99)], kept, base=-1)
    # every cursor kept is the latest for some slot: none is kept for nothing
    sources = {(p.source, p.start) for p in everything.pieces}
    assert all((c.token, c.offset) in sources for c in kept)


def test_a_range_rewritten_whole_supersedes_its_pieces_and_its_predecessors() -> None:
    old = StoredCursor(SlotRange(0, 99), 10, token=1, version=1)
    left = StoredCursor(SlotRange(0, 49), 20, token=2, version=2)
    right = StoredCursor(SlotRange(50, 99), 30, token=2, version=2)  # same transaction
    whole = StoredCursor(SlotRange(0, 99), 40, token=2, version=3)
    wider = StoredCursor(SlotRange(0, 200), 5, token=1, version=0)  # slots 100-200: only it
    assert superseded([old, left, right, wider]) == [0]
    assert superseded([old, left, right, whole, wider]) == [0, 1, 2]
    assert superseded([left, right]) == []
