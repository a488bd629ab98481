"""The order checker the process tests rely on: a killed member's open call ends with it."""

from __future__ import annotations

from tests.kafka.support.journal import Event, check


def test_a_call_started_between_recording_the_kill_and_the_kill_ends_with_the_victim() -> None:
    """Seen in CI under load: the test records the kill time, then signals; the victim starts
    a call in between. That call ended with the process (after its own start), so the next
    owner redoing the record later is no overtake."""
    events = [
        Event("S", b"k", 1, 1, 0, 0, 100, 1),
        Event("E", b"k", 1, 1, 0, 0, 110, 1),
        Event("S", b"k", 2, 1, 0, 1, 205, 1),  # after the recorded kill time (200)
        Event("S", b"k", 2, 2, 0, 1, 300, 1),  # the next owner, after the victim died
        Event("E", b"k", 2, 2, 0, 1, 310, 1),
    ]
    report = check(events, {b"k": 2}, killed={1: 200})
    assert report.violations == [] and not report.missing


def test_a_real_overlap_with_a_killed_member_is_still_caught() -> None:
    events = [
        Event("S", b"k", 1, 1, 0, 0, 100, 1),  # the victim runs 1 until it is killed at 500
        Event("S", b"k", 1, 2, 0, 0, 300, 1),  # another member starts 1 meanwhile
        Event("E", b"k", 1, 2, 0, 0, 310, 1),
    ]
    report = check(events, {b"k": 1}, killed={1: 500})
    assert report.violations, "an overlap with a live victim went unnoticed"
