"""One call for any scenario: race the installed peers on its topic and add keyshared's ratios.

Example, at the end of a scenario that measured keyshared as ``ks`` on ``topic``::

    add_peers(ctx, result, topic=topic, records=records, handler_s=0.005, concurrency=64,
              keyshared=ks)

Every peer reads the same topic from the beginning with its own fresh group, handles ``records``
records with the same handler (sleep ``handler_s``, or nothing) at the same concurrency, and is
timed like keyshared (first handler start to the ``records``-th finish, plus completion marks
for the steady-state figure). Each adds a measurement and the ratio ``keyshared_vs_<peer>``
both ways (``..._steady``: steady state, the plain name: whole run); a peer that is not
installed, or is turned off on the command line, adds a note instead, saying how to install it.
A peer whose run fails adds a note with its error and the scenario goes on: peers are other
people's software, and one failing must not cost the user keyshared's own figures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from keyshared.bench.context import BenchContext
from keyshared.bench.peers import parallel_consumer as pc
from keyshared.bench.peers import pyrallel
from keyshared.bench.peers.common import PeerRunError, PeerTiming
from keyshared.bench.result import Measurement, ScenarioResult

__all__ = ["add_peers"]


def add_peers(
    ctx: BenchContext,
    result: ScenarioResult,
    *,
    topic: str,
    records: int,
    handler_s: float,
    concurrency: int,
    keyshared: Measurement,
    timeout: float = 600.0,
    parallel_consumer: bool = True,
    pyrallel_modes: tuple[str, ...] = pyrallel.PYRALLEL_MODES,
) -> list[Measurement]:
    """Race every enabled, installed peer on ``topic``; return the measurements added.

    ``parallel_consumer`` and ``pyrallel_modes`` narrow the field to the peers that make sense
    for a scenario (an async handler races pyrallel's async mode, not 1,000 processes).

    :param records: records each peer handles (at most the topic's size).
    :param handler_s: the handler's sleep in seconds; 0 for a no-op handler.
    :param concurrency: keyshared's worker count, given to each peer as its concurrency.
    :param keyshared: keyshared's measurement on the same topic, the ratios' numerator.
    """
    added: list[Measurement] = []
    name = result.scenario
    handler = f"sleep {handler_s * 1000:g} ms" if handler_s > 0 else "no-op"
    if not parallel_consumer:
        pass
    elif not ctx.parallel_consumer:
        result.notes.append("Confluent Parallel Consumer: skipped (--no-parallel-consumer)")
    elif (install := pc.parallel_consumer_install()) is None:
        result.notes.append(pc.skip_note())
    else:
        ctx.say(f"{name}: Confluent Parallel Consumer {install.version} ({handler})")
        timing = _guarded(
            result,
            "Confluent Parallel Consumer",
            pc.run_parallel_consumer,
            install,
            ctx.bootstrap,
            topic,
            ctx.new_group(f"{name}-pc"),
            records,
            handler_s,
            concurrency,
            timeout,
        )
        if timing is not None:
            added.append(
                _measure(
                    result,
                    f"Confluent Parallel Consumer {install.version} (KEY order, "
                    f"maxConcurrency {concurrency})",
                    timing,
                    "keyshared_vs_parallel_consumer",
                    keyshared,
                    version=install.version,
                    ordering="KEY",
                    concurrency=concurrency,
                    commit_mode="PERIODIC_CONSUMER_ASYNCHRONOUS",
                )
            )
    if not pyrallel_modes:
        return added
    if not ctx.pyrallel:
        result.notes.append("pyrallel-consumer: skipped (--no-pyrallel)")
        return added
    version = pyrallel.pyrallel_available(ctx.pyrallel_python)
    if version is None:
        result.notes.append(pyrallel.skip_note(ctx.pyrallel_python))
        return added
    for mode in pyrallel_modes:
        ctx.say(f"{name}: pyrallel-consumer {version}, {mode} mode ({handler})")
        timing = _guarded(
            result,
            f"pyrallel-consumer ({mode})",
            pyrallel.run_pyrallel,
            ctx.pyrallel_python,
            mode,
            ctx.bootstrap,
            topic,
            ctx.new_group(f"{name}-pyrallel-{mode}"),
            records,
            handler_s,
            concurrency,
            timeout,
        )
        if timing is not None:
            unit = "processes" if mode == "process" else "in flight"
            added.append(
                _measure(
                    result,
                    f"pyrallel-consumer {version} {mode} (key_hash, {concurrency} {unit})",
                    timing,
                    f"keyshared_vs_pyrallel_{mode}",
                    keyshared,
                    version=version,
                    mode=mode,
                    ordering="key_hash",
                    concurrency=concurrency,
                )
            )
    return added


def _guarded(
    result: ScenarioResult, peer: str, run: Callable[..., PeerTiming], *args: Any
) -> PeerTiming | None:
    try:
        return run(*args)
    except PeerRunError as exc:
        result.notes.append(f"{peer} failed, no figure: {exc}")
        return None


def _measure(
    result: ScenarioResult,
    label: str,
    timing: PeerTiming,
    ratio: str,
    keyshared: Measurement,
    **extra: object,
) -> Measurement:
    measurement = result.add(timing.measurement(label, **extra))
    result.ratios_both(ratio, keyshared, measurement)
    return measurement
