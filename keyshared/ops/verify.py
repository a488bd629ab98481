"""Judge whether a group has safely and completely consumed a topic.

Why a separate, pure judgement: "complete" has several parts that are easy to get subtly wrong
in a script — the committed offset must reach the high watermark on *every* partition, nothing
may sit parked or blocked (a parked key's later records went to the DLQ, so a cursor at the end
does not mean they were processed), and the commit metadata must be readable. Each failed part
becomes one :class:`Problem` naming the partition, offsets or key, so the output says exactly
what to look at.

Example::

    verdict = judge(status, allow_dlq=True)
    if not verdict.complete:
        for problem in verdict.problems:
            print(problem.topic, problem.partition, problem.detail)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from keyshared.ops.group_status import StatusReport, format_ranges

__all__ = ["IDLE_STATES", "Problem", "VerifyResult", "judge"]

IDLE_STATES = frozenset({"empty", "dead", "unknown"})
"""Group states without live members; in any other the answer may change while they consume."""


@dataclass(frozen=True)
class Problem:
    """One reason the group is not done. ``kind`` is one of ``unconsumed``, ``deleted``,
    ``metadata``, ``parked``, ``blocked``, ``dead_lettered``."""

    kind: str
    topic: str
    partition: int
    detail: str
    ranges: tuple[tuple[int, int], ...] = ()
    count: int = 0
    key: str | None = None


@dataclass
class VerifyResult:
    """``complete`` when there is no problem; ``notes`` are worth reading but do not fail."""

    complete: bool
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def judge(status: StatusReport, *, allow_dlq: bool = True) -> VerifyResult:
    """Check every part of "safely and completely consumed" on ``status``.

    :param allow_dlq: dead letters of the group are counted and reported as notes; with
        ``False`` each source partition that has some is a ``dead_lettered`` problem (for
        pipelines where any dead letter means the run failed).
    """
    problems: list[Problem] = []
    notes: list[str] = []
    for part in status.partitions:
        where = (part.topic, part.partition)
        if part.pending_count:
            problems.append(
                Problem(
                    "unconsumed",
                    *where,
                    f"{part.pending_count} offset(s) not done: {format_ranges(part.pending)} "
                    f"(committed {_offset(part.committed)}, high watermark {part.high_watermark})",
                    ranges=part.pending,
                    count=part.pending_count,
                )
            )
        if part.deleted_unconsumed:
            problems.append(
                Problem(
                    "deleted",
                    *where,
                    f"{part.deleted_unconsumed} record(s) were deleted by retention before the "
                    f"group consumed them (committed {_offset(part.committed)}, log start "
                    f"{part.low_watermark})",
                    ranges=((part.committed or 0, part.low_watermark - 1),),
                    count=part.deleted_unconsumed,
                )
            )
        if part.metadata == "undecodable":
            problems.append(
                Problem(
                    "metadata",
                    *where,
                    "commit metadata has keyshared's prefix but does not decode; the finished "
                    "offsets it held will be processed again",
                )
            )
        elif part.metadata == "foreign":
            notes.append(
                f"{part.topic}[{part.partition}]: commit metadata was written by another "
                "tool (not keyshared)"
            )
    for row in status.key_states or ():
        state = str(row.get("state"))
        key = row.get("key")
        offset = row.get("offset")
        error = f": {row['error']}" if row.get("error") else ""
        problems.append(
            Problem(
                "blocked" if state == "blocked" else "parked",
                str(row.get("topic")),
                int(str(row.get("partition"))),
                f"key {_key(key, row.get('key_encoding'))} is {state} since offset {offset}{error} "
                "(release it with `keyshared release`)",
                key=None if key is None else str(key),
            )
        )
    for dlq in status.dlq:
        for partition, count in sorted((dlq.by_source or {}).items()):
            text = f"{count} record(s) dead-lettered to {dlq.topic!r}"
            if allow_dlq:
                notes.append(f"{dlq.source_topic}[{partition}]: {text}")
            else:
                problems.append(
                    Problem("dead_lettered", dlq.source_topic, partition, text, count=count)
                )
    if status.info.state not in IDLE_STATES or status.info.members:
        members = len(status.info.members)
        notes.append(
            f"group {status.group!r} is {status.info.state} with {members} member(s): "
            "it is still consuming, so this answer may change"
        )
    return VerifyResult(complete=not problems, problems=problems, notes=notes)


def _offset(value: int | None) -> str:
    return "nothing" if value is None else str(value)


def _key(key: object, encoding: object) -> str:
    if key is None or encoding == "null":
        return "<null>"
    return f"0x{key}" if encoding == "hex" else repr(key)
