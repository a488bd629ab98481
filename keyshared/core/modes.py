"""The consumer's modes, named once for the options, the poison rules and the CLI.

- ``partition``: the Kafka group assigns partitions; keys run in parallel inside each.
- ``key_shared``: members split the slot space of a topic through the coordinator.
- ``exclusive``: one active member; strictly serial per partition.

A :class:`Mode` is a ``str`` (``Mode.KEY_SHARED == "key_shared"``), so options, the CLI and the
member znodes keep the plain names users type.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["MODES", "Mode"]


class Mode(StrEnum):
    PARTITION = "partition"
    KEY_SHARED = "key_shared"
    EXCLUSIVE = "exclusive"


MODES = tuple(m.value for m in Mode)
