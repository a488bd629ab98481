"""Operator tooling behind ``keyshared status``, ``keyshared verify`` and ``keyshared reset``.

A pure model of what a group's committed state means (:mod:`.group_status`, :mod:`.verify`), a
thin Kafka reader (:mod:`.admin`), a reader of members' ``/metrics`` and ``/hotkeys``
(:mod:`.member_view`) and the glue that gathers one report (:mod:`.collect`); the one writer,
:mod:`.reset`, moves a stopped group's position. The CLI modules only parse options and render.
"""

from __future__ import annotations

from keyshared.ops.admin import GroupReader, OpsError, UnreachableBrokerError
from keyshared.ops.collect import UnknownGroupError, collect_status, probe_pending
from keyshared.ops.group_status import PartitionStatus, StatusReport, partition_status
from keyshared.ops.verify import Problem, VerifyResult, judge

__all__ = [
    "GroupReader",
    "OpsError",
    "PartitionStatus",
    "Problem",
    "StatusReport",
    "UnknownGroupError",
    "UnreachableBrokerError",
    "VerifyResult",
    "collect_status",
    "judge",
    "partition_status",
    "probe_pending",
]
