"""Workload shapes of the ``io`` scenarios: how many records each key has, and how they mix.

Why shapes: with the topic's records spread round-robin over 10,000 keys at 4 records per key,
each key's FIFO in the window is almost always empty, so a window that does badly with deep
per-key queues (a 2x regression) looked fine. Each shape is a topic of its own:

- ``"4"``, ``"8"``, ``"32"``: exactly that many records per key, over ``records / per_key``
  keys (10,000 at full size), interleaved at random by a seeded shuffle, so a key's records are
  neither adjacent nor evenly spaced, as in real traffic.
- ``"zipf"``: each record's key drawn from a Zipf law (s = 1.1) over 10,000 keys: a few keys
  with very deep queues, a long tail of keys with one record. Draws are independent, so the
  keys are interleaved at random by construction.

Everything here is pure and seeded: the same shape and size give the same topic on every run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from keyshared.bench.workload import key_name, zipf_keys

__all__ = [
    "DEFAULT_SHAPES",
    "HEADLINE_SHAPE",
    "KEYS",
    "SEED",
    "ZIPF",
    "ZIPF_S",
    "Shape",
    "interleaved_keys",
    "parse_shapes",
    "shape_keys",
    "shape_records",
]

ZIPF = "zipf"
ZIPF_S = 1.1
KEYS = 10_000  # keys of a full-size shape (uniform shapes: records = per_key x KEYS)
# --quick: 500 / 1,000 / 4,000 records at 4 / 8 / 32 per key; still more keys than io's 64
# workers, so the uniform shapes' bound stays W/L.
QUICK_UNIFORM_KEYS = 125
# Full, quick: the hottest key alone is ~15% of them, so its records run one after another for
# about 150 x L at --quick (1,000): every contender of io and io_work pays that on this shape.
ZIPF_RECORDS = (20_000, 1_000)
SEED = 23  # any fixed seed makes runs comparable
DEFAULT_SHAPES = ("4", "8", "32", ZIPF)
HEADLINE_SHAPE = "8"  # where the once-per-scenario contenders (serial, quixstreams) run


@dataclass(frozen=True)
class Shape:
    """One workload shape: ``per_key`` records per key, or a Zipf law when it is None."""

    name: str
    per_key: int | None

    @property
    def is_zipf(self) -> bool:
        return self.per_key is None

    @property
    def label(self) -> str:
        if self.per_key is None:
            return f"Zipf s={ZIPF_S} over {KEYS:,} keys"
        return f"{self.per_key} records per key"


def parse_shapes(text: str) -> tuple[Shape, ...]:
    """``"4,8,32,zipf"`` -> shapes, in the given order, duplicates dropped.

    :raises ValueError: an item that is neither a positive integer nor ``zipf`` (the message
        names it), or no item at all.
    """
    shapes: list[Shape] = []
    for raw in text.split(","):
        item = raw.strip().lower()
        if not item:
            continue
        if item == ZIPF:
            shape = Shape(ZIPF, None)
        elif item.isdigit() and int(item) > 0:
            shape = Shape(str(int(item)), int(item))
        else:
            raise ValueError(
                f"shape {raw.strip()!r} is neither a number of records per key (e.g. 8) nor "
                f"{ZIPF!r}"
            )
        if shape not in shapes:
            shapes.append(shape)
    if not shapes:
        raise ValueError("no shape given; e.g. --shapes 4,8,32,zipf")
    return tuple(shapes)


def shape_records(shape: Shape, *, quick: bool, records: int | None = None) -> int:
    """Records of ``shape``'s topic: ``records`` when given (rounded down to whole keys for a
    uniform shape), else the full or ``--quick`` size."""
    if shape.per_key is None:
        return records if records is not None else ZIPF_RECORDS[1 if quick else 0]
    if records is not None:
        return max(1, records // shape.per_key) * shape.per_key
    return shape.per_key * (QUICK_UNIFORM_KEYS if quick else KEYS)


def interleaved_keys(per_key: int, key_count: int, seed: int = SEED) -> list[bytes]:
    """``per_key`` records for each of ``key_count`` keys, in a seeded random order."""
    keys = [key_name(i) for i in range(key_count)] * per_key
    random.Random(seed).shuffle(keys)
    return keys


def shape_keys(shape: Shape, records: int, seed: int = SEED) -> list[bytes]:
    """The key of every record of ``shape``'s topic, in produce order (``records`` from
    :func:`shape_records`)."""
    if shape.per_key is None:
        return zipf_keys(records, KEYS, ZIPF_S, seed)
    return interleaved_keys(shape.per_key, max(1, records // shape.per_key), seed)
