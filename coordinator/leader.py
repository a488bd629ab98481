"""One leader per group, which turns members and pins into the written assignment.

Leadership is kazoo's :class:`~kazoo.recipe.election.Election` on the group's ``leader``
directory: every member contends, the lowest ephemeral sequence node wins, and when the leader's
session ends the next contender takes over. While leading, a member watches ``members`` and
``pins`` and, on every change, runs the pure planner (:func:`keyshared.core.assignment.
plan_assignment`: sticky, balanced within a tolerance, few members per event, pins honoured) on
the assignment in force and
writes the result as the next generation with :func:`coordinator.assignment.write_assignment`
(compare-and-set, conditional on its own election znode). A leader that lost its session can
therefore never overwrite its successor's plan.

Key filters and weights are carried in the member znodes but do not shape the plan: a slot
range is a slice of the hash space, which a glob filter on keys cannot be mapped onto, and the
planner balances slots evenly. In ``key_shared`` mode every member should declare the same key
filters (a record skipped by its range's owner is skipped for the whole group); the leader logs
a warning when they differ.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.recipe.election import Election

from coordinator._worker import Refresher
from coordinator.assignment import AssignmentSnapshot, read_assignment, write_assignment
from coordinator.errors import NotLeader
from coordinator.layout import GroupLayout
from coordinator.members import read_members
from coordinator.pins import read_pins
from keyshared.core.assignment import plan_assignment

__all__ = ["AssignmentLeader"]

log = logging.getLogger(__name__)

_RETRY_S = 1.0
"""Pause before contending again after the election itself failed (e.g. no connection)."""


class AssignmentLeader:
    """Contends for the group's leadership and, while leading, keeps the assignment planned.

    Example::

        leader = AssignmentLeader(client, GroupLayout("orders"), "worker-1")
        leader.start()          # returns at once; contends on its own thread
        ...
        leader.stop()           # leaves the election (and leadership, if held)

    :param client: a started kazoo client.
    :param layout: the group's paths.
    :param member_id: this member's id, the election identifier.
    :param on_written: called (on the leader's thread) with each generation this leader writes.
    """

    def __init__(
        self,
        client: KazooClient,
        layout: GroupLayout,
        member_id: str,
        on_written: Callable[[AssignmentSnapshot], None] | None = None,
    ) -> None:
        self._client = client
        self._layout = layout
        self._member_id = member_id
        self._on_written = on_written
        self._election = Election(client, layout.leader, member_id)
        self._stopped = threading.Event()
        self._leading = threading.Event()
        self._term_over = threading.Event()
        self._thread = threading.Thread(
            target=self._contend, name=f"keyshared-leader-{member_id}", daemon=True
        )

    @property
    def is_leader(self) -> bool:
        """Whether this member currently leads (it may learn of a lost session late)."""
        return self._leading.is_set()

    def contenders(self) -> list[str]:
        """Member ids in the election, the leader first."""
        return list(self._election.contenders())

    def start(self) -> None:
        """Start contending on a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Leave the election; a leader stops planning and its election znode is deleted."""
        self._stopped.set()
        self._term_over.set()
        self._election.cancel()
        if threading.current_thread() is not self._thread and self._thread.is_alive():
            self._thread.join()

    def _contend(self) -> None:
        while not self._stopped.is_set():
            try:
                self._election.run(self._lead)
            except Exception:
                log.exception(
                    "leader election of group %s failed; contending again", self._layout.group
                )
                self._stopped.wait(_RETRY_S)  # back off instead of spinning on a lasting error
            if not self._stopped.is_set():
                # a lost session ended the term: contend again with a fresh lock
                self._election = Election(self._client, self._layout.leader, self._member_id)

    def _lead(self) -> None:
        """The term: plan on every change until stopped or the session is lost."""
        lock = self._election.lock
        node = f"{lock.path}/{lock.node}"
        term_over = self._term_over = threading.Event()
        if self._stopped.is_set():
            return

        def on_state(state: str) -> bool:
            if state == KazooState.LOST:
                term_over.set()
                return True
            return False

        def replan() -> None:
            try:
                self._replan(node)
            except NotLeader as error:
                log.warning("%s", error)
                if self._client.exists(node) is None:
                    term_over.set()
                else:
                    refresher.poke()  # another write raced this one: plan again on it

        def on_children(_children: list[str]) -> bool | None:
            if refresher.stopped:
                return False
            refresher.poke()
            return None

        log.info("%s leads group %s", self._member_id, self._layout.group)
        self._client.add_listener(on_state)
        refresher = Refresher(f"keyshared-planner-{self._member_id}", replan, self._client)
        self._leading.set()
        try:
            self._client.ChildrenWatch(self._layout.members, on_children)
            self._client.ChildrenWatch(self._layout.pins, on_children)
            term_over.wait()
        finally:
            self._leading.clear()
            refresher.stop()
            self._client.remove_listener(on_state)
            log.info("%s no longer leads group %s", self._member_id, self._layout.group)

    def _replan(self, node: str) -> None:
        current = read_assignment(self._client, self._layout)
        members = read_members(self._client, self._layout)
        pins = read_pins(self._client, self._layout)
        plan = plan_assignment(current.assignment, members, pins)
        filters = {info.key_filters for info in members.values() if info.mode == "key_shared"}
        if len(filters) > 1:
            log.warning(
                "key_shared members of group %s declare different key filters: %s",
                self._layout.group,
                sorted(filters),
            )
        for slots, member in plan.ignored_pins:
            log.warning("pin of %s to %s ignored: member not live", slots, member)
        if current.generation > 0 and plan.assignment == current.assignment:
            return
        written = write_assignment(
            self._client,
            self._layout,
            plan.assignment,
            based_on=current,
            leader_id=self._member_id,
            leader_node=node,
        )
        log.info(
            "%s wrote generation %d of group %s (%d members, %d slots moved)",
            self._member_id,
            written.generation,
            self._layout.group,
            len(members),
            plan.moved_slots,
        )
        if self._on_written is not None:
            self._on_written(written)
