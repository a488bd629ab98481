"""`keyshared bench`: named benchmark scenarios against the real broker, with in-run baselines."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from keyshared.bench import BenchContext, ScenarioResult, load_scenarios
from keyshared.bench.report import print_result, write_chart, write_json
from keyshared.bench.shapes import DEFAULT_SHAPES, Shape, parse_shapes
from keyshared.cli.options import bootstrap_servers_option, zookeeper_option
from keyshared.demo.cluster import choose_cluster

__all__ = ["bench"]


def _parse_shapes(ctx: click.Context, param: click.Parameter, value: str) -> tuple[Shape, ...]:
    try:
        return parse_shapes(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command(context_settings={"show_default": True})
@click.argument("scenarios", nargs=-1, metavar="[SCENARIO]...")
@bootstrap_servers_option(
    required=False,
    help="Kafka to measure against [env KEYSHARED_BOOTSTRAP_SERVERS; default: the local "
    "dev cluster, started if needed and left running].",
)
@click.option("--quick", is_flag=True, help="Smoke sizes (seconds per scenario) for CI.")
@click.option(
    "--records",
    type=click.IntRange(min=100),
    help="Override the main record count (io, io_work: of each shape).",
)
@click.option("--handler-ms", type=click.FloatRange(min=0), help="Override the handler latency.")
@click.option("--workers", type=click.IntRange(min=1), help="Override keyshared's workers.")
@click.option(
    "--shapes",
    default=",".join(DEFAULT_SHAPES),
    callback=_parse_shapes,
    help="Workload shapes of io and io_work: records per key (numbers) and/or zipf "
    "(s=1.1 over 10k keys), keys in seeded random order.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-results"),
    help="Folder for results.json and one PNG chart per scenario.",
)
@click.option(
    "--quix-python",
    type=click.Path(dir_okay=False),
    help="Python interpreter with quixstreams installed (its confluent-kafka pin conflicts "
    "with keyshared's, so it may live in another venv) [default: the venv of "
    "--install-peers if present, else this one].",
)
@click.option(
    "--pyrallel-python",
    type=click.Path(dir_okay=False),
    help="Python interpreter with pyrallel-consumer installed [default: the venv of "
    "--install-peers].",
)
@click.option(
    "--parallel-consumer/--no-parallel-consumer",
    default=True,
    help="Race Confluent Parallel Consumer (Java) in io, noop and sweep, when installed.",
)
@click.option(
    "--pyrallel/--no-pyrallel",
    default=True,
    help="Race pyrallel-consumer (async and process modes) in io and noop, async in sweep, "
    "when installed.",
)
@click.option(
    "--install-peers",
    is_flag=True,
    help="Install the peer libraries (Parallel Consumer jars + harness, pyrallel-consumer and "
    "quixstreams venvs) into the cache, then exit. Needs mvn, a JDK 17 and PyPI, once.",
)
@zookeeper_option(help="ZooKeeper for the coordinator's scenarios [env KEYSHARED_ZOOKEEPER].")
@click.option(
    "--guard",
    is_flag=True,
    help="Regression guard: small io and noop runs; exit 1 when keyshared's steady-state rate "
    "falls below a floor relative to a baseline measured in the same run (about 10-20 s).",
)
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and exit.")
def bench(
    scenarios: tuple[str, ...],
    bootstrap_servers: str | None,
    quick: bool,
    records: int | None,
    handler_ms: float | None,
    workers: int | None,
    shapes: tuple[Shape, ...],
    out: Path,
    quix_python: str | None,
    pyrallel_python: str | None,
    parallel_consumer: bool,
    pyrallel: bool,
    install_peers: bool,
    zookeeper: str | None,
    guard: bool,
    list_only: bool,
) -> None:
    """Run benchmark scenarios (all but sweep by default); every figure is compared with baselines
    measured in the same run, because absolute rates on a shared machine mean little.

    \b
    keyshared bench --list          what each scenario measures
    keyshared bench io              one scenario, full size
    keyshared bench io --shapes 8,zipf   io on two of its workload shapes
    keyshared bench sweep           records/s vs handler latency, keyshared vs its peers
    keyshared bench --quick         every scenario, smoke size
    keyshared bench --install-peers the peers io and noop race keyshared against
    keyshared bench --guard         the CI regression guard (ratios, exit 1 below a floor)
    """
    registry = load_scenarios()
    console = Console(highlight=False)
    if install_peers:
        _install_peers(console)
        return
    if list_only:
        for scenario in registry.values():
            only = "" if scenario.in_full_run else " (only when named)"
            console.print(f"[bold]{scenario.name:<10}[/] {scenario.summary}{only}")
        return
    unknown = [name for name in scenarios if name not in registry]
    if unknown:
        raise click.BadParameter(
            f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(registry)}",
            param_hint="SCENARIO",
        )
    if guard and scenarios:
        raise click.UsageError("--guard runs its own small io and noop checks; name no scenario")
    chosen = list(scenarios) or [n for n, s in registry.items() if s.in_full_run]
    err = Console(stderr=True, highlight=False)
    try:
        where = choose_cluster(bootstrap_servers, zookeeper, err)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    ctx = BenchContext(
        where.bootstrap,
        quick,
        records,
        handler_ms,
        workers,
        quix_python or _cached_quix_python(),
        where.zookeeper,
        parallel_consumer,
        pyrallel,
        pyrallel_python,
        shapes=shapes,
        out=out,
        console=err,
    )
    out.mkdir(parents=True, exist_ok=True)
    if guard:
        try:
            passed = _run_guard(ctx, console, out)
        finally:
            ctx.close()
            where.release(False, err)
        if not passed:
            raise SystemExit(1)
        return
    results: list[ScenarioResult] = []
    try:
        for name in chosen:
            err.print(f"[bold]bench {name}[/] ({'quick' if quick else 'full'} size)")
            began = time.monotonic()
            result = registry[name].run(ctx)
            result.elapsed_seconds = time.monotonic() - began
            results.append(result)
            print_result(console, result)
            write_chart(out, result)
            write_json(out / "results.json", results, _run_params(ctx, chosen))
    finally:
        ctx.close()
        where.release(False, err)
    err.print(f"Results: {out / 'results.json'} and {len(results)} chart(s) in {out}/")


def _run_guard(ctx: BenchContext, console: Console, out: Path) -> bool:
    """Run the guard, print each check's comparison (and the reason of a failure), write
    ``guard.json``; True when every check passed."""
    from keyshared.bench.guard import run_guard

    began = time.monotonic()
    checks = run_guard(ctx, say=ctx.say)
    seconds = time.monotonic() - began
    for check in checks:
        mark = "[green]✓[/]" if check.passed else "[red]✗[/]"
        console.print(f"{mark} {escape(check.describe())}", soft_wrap=True)
    passed = all(check.passed for check in checks)
    data = {
        "passed": passed,
        "seconds": round(seconds, 1),
        "checks": [
            {
                "name": c.case.name,
                "keyshared": c.keyshared.to_json(),
                "baseline": c.baseline.to_json(),
                "ratio": round(c.ratio, 4),
                "whole_run_ratio": round(c.whole_run_ratio, 4),
                "floor": c.case.floor,
                "passed": c.passed,
                "attempt": c.attempt,
            }
            for c in checks
        ],
    }
    (out / "guard.json").write_text(json.dumps(data, indent=2) + "\n")
    verdict = "passed" if passed else "[red]FAILED[/]"
    console.print(f"guard {verdict} in {seconds:.0f} s ({out / 'guard.json'})")
    return passed


def _install_peers(console: Console) -> None:
    """Install every peer, one line per peer; exit 1 when any of them failed."""
    from keyshared.bench.peers import install_peers

    err = Console(stderr=True, highlight=False)
    outcomes = install_peers(progress=lambda text: err.print(f"  [dim]{text}[/]"))
    for outcome in outcomes:
        mark = "[green]✓[/]" if outcome.ok else "[red]✗[/]"
        console.print(f"{mark} {outcome.peer}: {outcome.detail}", soft_wrap=True)
    if not all(outcome.ok for outcome in outcomes):
        raise SystemExit(1)


def _cached_quix_python() -> str | None:
    """The quixstreams venv of ``--install-peers`` when it exists (else this interpreter)."""
    from keyshared.bench.peers.install import default_quix_python

    python = default_quix_python()
    return str(python) if python.exists() else None


def _run_params(ctx: BenchContext, chosen: list[str]) -> dict[str, object]:
    return {
        "scenarios": chosen,
        "quick": ctx.quick,
        "records": ctx.records,
        "handler_ms": ctx.handler_ms,
        "workers": ctx.workers,
        "shapes": [shape.name for shape in ctx.shapes or ()],
        "bootstrap": ctx.bootstrap,
        "parallel_consumer": ctx.parallel_consumer,
        "pyrallel": ctx.pyrallel,
    }
