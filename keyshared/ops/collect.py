"""Gather a :class:`~keyshared.ops.group_status.StatusReport` from the cluster and the members.

The glue between the reader (:mod:`keyshared.ops.admin`), the pure model
(:mod:`keyshared.ops.group_status`) and the members' endpoints
(:mod:`keyshared.ops.member_view`). Kept apart from the CLI so the same report can be produced by
a script or a test without click.

Example::

    with GroupReader(config, timeout=10.0) as reader:
        status = collect_status(reader, "billing", ["orders"])
        status = probe_pending(reader, status)      # verify: ignore markers and compacted gaps
"""

from __future__ import annotations

from collections.abc import Sequence

from keyshared.kafka.keystate import topic_for
from keyshared.ops.admin import GroupReader, OpsError
from keyshared.ops.group_status import (
    DlqTopic,
    PartitionStatus,
    StatusReport,
    partition_status,
    refine_pending,
)
from keyshared.ops.member_view import fetch_member

__all__ = ["DEFAULT_DLQ_TOPIC", "UnknownGroupError", "collect_status", "probe_pending"]

DEFAULT_DLQ_TOPIC = "{topic}.dlq"
"""The consumer's default (``ConsumerOptions.dlq_topic``); ``{topic}`` is the source topic."""


class UnknownGroupError(OpsError):
    """The coordinator does not know the group and it has no committed offsets."""


def collect_status(
    reader: GroupReader,
    group: str,
    topics: Sequence[str] = (),
    *,
    dlq_topic: str = DEFAULT_DLQ_TOPIC,
    metrics_urls: Sequence[str] = (),
    count_dead_letters: bool = False,
    allow_unknown: bool = False,
) -> StatusReport:
    """Read everything ``keyshared status`` shows about ``group``.

    :param topics: the topics to report; empty means every topic the group committed to or is
        assigned.
    :param count_dead_letters: read the DLQ topics to count this group's dead letters per
        source partition (``verify``); otherwise only their sizes are read.
    :param allow_unknown: return a report for a group the cluster does not know (``verify`` on
        an empty topic) instead of raising :class:`UnknownGroupError`.
    :raises OpsError: the broker did not answer, a topic is missing, or a read timed out.
    """
    existing = reader.topics()
    info = reader.describe_group(group)
    committed = reader.committed(group)
    if info.state == "dead" and not committed and not allow_unknown:
        raise UnknownGroupError(
            f"group {group!r} is unknown to the cluster: no members and no committed offsets "
            "(is the name right?)"
        )
    owners = {tp: m.client_id for m in info.members for tp in m.assignment}
    wanted = list(dict.fromkeys(topics)) or sorted(
        {topic for topic, _ in committed} | {topic for topic, _ in owners}
    )
    missing = [topic for topic in wanted if topic not in existing]
    if missing:
        raise OpsError(f"topic(s) not found on the broker: {', '.join(missing)}")
    tps = [(topic, p) for topic in wanted for p in range(existing[topic])]
    marks = reader.watermarks(tps)
    partitions = []
    for tp in tps:
        offset, metadata = committed.get(tp, (None, None))
        low, high = marks[tp]
        partitions.append(
            partition_status(
                *tp, committed=offset, metadata=metadata, low=low, high=high, owner=owners.get(tp)
            )
        )
    key_topic = topic_for(group)
    states = reader.key_states(group, key_topic in existing)
    if states is not None:
        states = [row for row in states if row.get("topic") in wanted]
    dlqs = []
    for topic in wanted:
        name = dlq_topic.format(topic=topic)
        if name not in existing:
            dlqs.append(DlqTopic(name, topic, exists=False))
            continue
        sizes = reader.watermarks((name, p) for p in range(existing[name]))
        by_source = (
            reader.dead_letters(name, existing[name], group, topic) if count_dead_letters else None
        )
        records = sum(high - low for low, high in sizes.values())
        dlqs.append(DlqTopic(name, topic, exists=True, records=records, by_source=by_source))
    live = [fetch_member(url, group, reader.timeout) for url in metrics_urls]
    return StatusReport(group, info, partitions, key_topic, states, dlqs, live)


def probe_pending(reader: GroupReader, status: StatusReport) -> StatusReport:
    """Drop from each partition's pending ranges the offsets that hold no visible record.

    A transactional producer leaves commit markers, an aborted transaction leaves records a
    read-committed consumer never sees, and compaction leaves holes: none of them can ever be
    processed, so none of them makes a group "not done". Only partitions with pending offsets
    are read, from the committed cursor to the high watermark.
    """
    refined: list[PartitionStatus] = []
    for part in status.partitions:
        if not part.pending:
            refined.append(part)
            continue
        start, end = part.pending[0][0], part.pending[-1][1] + 1
        seen, probed_up_to = reader.visible_offsets(part.topic, part.partition, start, end)
        refined.append(refine_pending(part, seen, probed_up_to))
    status.partitions = refined
    return status
