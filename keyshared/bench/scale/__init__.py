"""The coordinator's scale model: the real planner at 10-1,000 members, and a real ZooKeeper under
simulated ``key_shared`` members (docs/scaling.md).

Two measurements, both on the production code paths:

- **planner** (pure, no I/O): :func:`keyshared.core.assignment.plan_assignment` at N members,
  the first plan and then churn (one member joins, the next event one leaves, alternately):
  time per plan, ranges per member, moves (ranges that change owner, each a drain), members
  touched per join and per leave, the keyspace moved (x 1/N) and the most and least loaded
  member against the fair share. Every plan is checked: each slot owned exactly once, by a live
  member, shares within the planner's tolerance (:func:`~keyshared.core.assignment.share_bounds`).
  ``--planner-module`` measures another planner file through the same code (a before/after).
- **zookeeper**: N members in this process, each its own kazoo session doing what a
  ``key_shared`` member does with ZooKeeper (``keyshared/modes/key_shared.py``), through the
  coordinator's own recipes: an ephemeral member znode (:class:`Membership`), a candidacy
  (:class:`AssignmentLeader`, which runs the planner and writes the assignment), an
  :class:`AssignmentWatch`; on each generation it writes the final cursors of the ranges it
  loses and releases their leases, queues for the leases of the ranges it gains (the
  mandatory drain: granted once the previous owner released), and re-reads the cursors
  overlapping the ranges it holds, as the member does. Each commit interval every member
  writes the cursors of all its ranges in one transaction, a lease ``check`` per range
  (:func:`~coordinator.cursors.flush_together`), covering every partition (a busy topic:
  every partition's cursor moved), and the leader runs the low-watermark pass every 5 s
  (read every cursor, delete the superseded ones). No Kafka and no handlers: a drain here is
  the coordination alone, with nothing in flight. ZooKeeper's own counters (``mntr``, and the
  zxid from ``stat``: one per write transaction) give znodes, watches and writes.

Run::

    python -m keyshared.bench.scale --members 10,100 --planner-members 10,100,1000 \
        --partitions 64 --out scale-results.json

It starts a private ZooKeeper (the cached jars of ``keyshared dev``) unless ``--zookeeper``
names one; a private server's ``mntr`` counts only this run.

The package, one job a module: :mod:`.planner` (the planner, no I/O), :mod:`.zookeeper_stats`
(the server's counters and a private server), :mod:`.members` (the simulated members),
:mod:`.churn` (one churn event), :mod:`.measure` (a whole ZooKeeper run), :mod:`.capacity`
(the write ceiling) and :mod:`.__main__` (the command line).
"""

from __future__ import annotations

from keyshared.bench.scale.capacity import WriteCapacity, measure_write_capacity
from keyshared.bench.scale.churn import EventFigures
from keyshared.bench.scale.measure import ZooKeeperFigures, measure_zookeeper
from keyshared.bench.scale.members import SimGroup, SimMember
from keyshared.bench.scale.planner import (
    PlannerFigures,
    check_assignment,
    fragmentation,
    load_planner,
    measure_planner,
    planner_table,
)
from keyshared.bench.scale.zookeeper_stats import four_letter, mntr, private_zookeeper

__all__ = [
    "EventFigures",
    "PlannerFigures",
    "SimGroup",
    "SimMember",
    "WriteCapacity",
    "ZooKeeperFigures",
    "check_assignment",
    "four_letter",
    "fragmentation",
    "load_planner",
    "measure_planner",
    "measure_write_capacity",
    "measure_zookeeper",
    "mntr",
    "planner_table",
    "private_zookeeper",
]
