"""The consumer's modes, named once for the options, the poison rules and the CLI.

- ``partition``: the Kafka group assigns partitions; keys run in parallel inside each.
- ``key_shared``: members split the slot space of a topic through the coordinator.
- ``exclusive``: one active member; strictly serial per partition.
"""

from __future__ import annotations

__all__ = ["MODES"]

MODES = ("partition", "key_shared", "exclusive")
