"""Run one scenario over several workload shapes, one topic and one nested result per shape.

Why per-shape topics and results: a ratio compares contenders on the same records, so each
shape (4, 8, 32 records per key, Zipf; see :mod:`keyshared.bench.shapes`) is its own topic,
raced by every contender, and reported as its own nested :class:`ScenarioResult`. What spans
the shapes, the worst shape's ratio, goes to the top level: a regression that hits only deep
per-key queues must show in the headline, not be averaged away.

Example, the body of a scenario::

    def race(ctx, nested, topic):  # measure every contender on topic.name, add ratios
        ...

    run_shapes(ctx, result, "io", race)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from keyshared.bench.context import BenchContext
from keyshared.bench.result import Measurement, ScenarioResult, steady_name
from keyshared.bench.shapes import DEFAULT_SHAPES, HEADLINE_SHAPE, ZIPF, Shape, parse_shapes
from keyshared.bench.shapes import shape_keys as make_keys
from keyshared.bench.shapes import shape_records as size_of
from keyshared.bench.workload import produce

__all__ = [
    "Contender",
    "ShapeTopic",
    "chosen_shapes",
    "headline",
    "race_trio",
    "run_shapes",
    "summarise",
]

# Ratios whose worst shape is reported at the top level of a shaped scenario, and whether the
# Zipf shape counts: the thread pool ignores per-key order, so under skew it is not held back by
# the hottest key and keyshared_vs_thread_pool there measures the skew, not keyshared. Each is
# summarised both ways, steady state first.
_SUMMARISED_WHOLE_RUN = {
    "keyshared_vs_bound": True,
    "keyshared_cli_vs_bound": True,
    "keyshared_vs_thread_pool": False,
    "keyshared_vs_parallel_consumer": True,
}
SUMMARISED = {
    name: with_zipf
    for whole, with_zipf in _SUMMARISED_WHOLE_RUN.items()
    for name in (steady_name(whole), whole)
}


@dataclass(frozen=True)
class ShapeTopic:
    """A produced shape: its topic, the key of each record in produce order, and whether the
    scenario's once-only contenders (serial consumer, quixstreams) run on it."""

    shape: Shape
    name: str
    keys: list[bytes]
    headline: bool

    @property
    def records(self) -> int:
        return len(self.keys)


Race = Callable[[BenchContext, ScenarioResult, ShapeTopic], None]
Contender = tuple[str, str, Callable[[str], Measurement]]
"""What the progress line says, the group's suffix, and the run given a fresh group id."""


def race_trio(
    ctx: BenchContext,
    nested: ScenarioResult,
    tag: str,
    bound: tuple[Measurement, Measurement],
    trio: tuple[Contender, Contender, Contender],
) -> tuple[Measurement, Measurement, Measurement]:
    """Run keyshared in-process, keyshared through its CLI and the thread pool (in that order)
    on one shape, and add the ratios every shaped scenario reports against the order bound
    (nominal and measured L) and against the pool, each both ways (steady state and whole
    run; see :meth:`ScenarioResult.ratios_both`)."""
    figures = []
    for what, suffix, run in trio:
        ctx.say(f"{tag}: {what}")
        figures.append(nested.add(run(ctx.new_group(f"{tag}-{suffix}"))))
    ks, cli, pool = figures
    nominal, measured = bound
    nested.ratios_both("keyshared_vs_bound", ks, nominal)
    nested.ratios_both("keyshared_vs_bound_measured_L", ks, measured)
    nested.ratios_both("keyshared_cli_vs_bound", cli, nominal)
    nested.ratios_both("keyshared_vs_thread_pool", ks, pool)
    nested.ratios_both("keyshared_cli_vs_thread_pool", cli, pool)
    nested.ratios_both("thread_pool_vs_bound", pool, nominal)
    return ks, cli, pool


def chosen_shapes(ctx: BenchContext) -> tuple[Shape, ...]:
    """The shapes of this run: ``--shapes``, or every default shape."""
    return ctx.shapes or parse_shapes(",".join(DEFAULT_SHAPES))


def headline(shapes: tuple[Shape, ...]) -> Shape:
    """The shape that gets the once-only contenders: 8 per key when chosen, else the first."""
    return next((s for s in shapes if s.name == HEADLINE_SHAPE), shapes[0])


def run_shapes(ctx: BenchContext, result: ScenarioResult, prefix: str, race: Race) -> None:
    """For each chosen shape: a fresh one-partition topic, produced, then ``race`` into a
    nested result; finally the worst-shape ratios at the top (:func:`summarise`)."""
    shapes = chosen_shapes(ctx)
    first = headline(shapes)
    for shape in shapes:
        keys = make_keys(shape, size_of(shape, quick=ctx.quick, records=ctx.records))
        topic = ctx.new_topic(f"{prefix}-{shape.name}", 1)
        produce(ctx.bootstrap, topic, keys)
        distinct = len(set(keys))
        nested = result.shape(
            shape.name,
            f"{shape.label}: {len(keys):,} records over {distinct:,} keys, random order",
            {"records": len(keys), "keys": distinct, "per_key": shape.per_key, "topic": topic},
        )
        ctx.say(f"{prefix} [{shape.name}]: {len(keys):,} records, {distinct:,} keys on {topic}")
        race(ctx, nested, ShapeTopic(shape, topic, keys, shape == first))
    summarise(result)


def summarise(result: ScenarioResult) -> None:
    """Put each :data:`SUMMARISED` ratio's worst shape at the top level as ``worst_<ratio>``
    (and a note naming the shape)."""
    for name, with_zipf in SUMMARISED.items():
        per_shape = result.shape_ratios(name)
        if not with_zipf:
            per_shape.pop(ZIPF, None)
        if not per_shape:
            continue
        shape, value = min(per_shape.items(), key=lambda item: item[1])
        result.ratios[f"worst_{name}"] = value
        listed = ", ".join(f"{s}: {v:.2f}" for s, v in per_shape.items())
        result.notes.append(f"{name} per shape: {listed} (worst: {shape})")
