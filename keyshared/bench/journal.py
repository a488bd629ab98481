"""Journals of finished records (``partition offset`` lines) and what a restart did again.

Why a journal and not the consumer's counters: a consumer killed with SIGKILL reports nothing,
and "which records had finished before the kill" is exactly what the redo figure needs. The
handler appends a line after the record's work is done, so a journaled record is one whose
effect happened, committed or not.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["Redo", "parse_journal", "read_journal", "redo"]

Position = tuple[int, int]  # partition, offset


def parse_journal(lines: Iterable[str]) -> list[Position]:
    """Every ``partition offset`` line, in order; a torn last line (the writer was killed in
    the middle of it) is ignored."""
    found: list[Position] = []
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            found.append((int(parts[0]), int(parts[1])))
    return found


def read_journal(path: Path) -> list[Position]:
    """:func:`parse_journal` of a file (empty when it does not exist)."""
    if not path.exists():
        return []
    with path.open() as lines:
        return parse_journal(lines)


class Redo:
    """How many of the ``before`` records a restart ran again.

    :param finished_before: distinct records finished before the kill.
    :param redone: how many of them the restart ran again.
    """

    __slots__ = ("finished_before", "redone")

    def __init__(self, finished_before: int, redone: int) -> None:
        self.finished_before, self.redone = finished_before, redone

    @property
    def fraction(self) -> float:
        """``redone / finished_before`` (0 when nothing had finished)."""
        return self.redone / self.finished_before if self.finished_before else 0.0


def redo(before: Iterable[Position], after: Iterable[Position]) -> Redo:
    """What ``after`` (the restart's journal) repeated of ``before`` (the killed run's)."""
    done = set(before)
    return Redo(len(done), len(done.intersection(after)))
