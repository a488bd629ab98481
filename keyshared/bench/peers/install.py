"""``keyshared bench --install-peers``: put every peer where ``keyshared bench`` looks for it.

- Confluent Parallel Consumer: its jars into the jar cache (Maven, once), the harness compiled
  with javac into the peers cache.
- pyrallel-consumer: a venv ``<peers cache>/pyrallel-venv``, installed with
  ``--ignore-requires-python`` (it declares Python >= 3.12 and runs on 3.11).
- quixstreams: a venv ``<peers cache>/quix-venv`` (its confluent-kafka pin conflicts with
  keyshared's), the default of ``--quix-python`` when present.

Each step is idempotent (a second run finds everything in place within seconds) and one failing
step does not stop the others: the user gets one line per peer saying what is ready or why not.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from keyshared.bench.peers.common import PeerRunError, default_peers_cache, venv_python
from keyshared.bench.peers.parallel_consumer import PcInstall, install_parallel_consumer
from keyshared.bench.peers.pyrallel import PYRALLEL_VERSION, pyrallel_available
from keyshared.bench.quix import quix_available
from keyshared.dev.errors import DevClusterError

__all__ = ["QUIX_VERSION", "PeerInstall", "default_quix_python", "install_peers"]

QUIX_VERSION = "3.28.1"
_PIP_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class PeerInstall:
    """One peer's outcome: ``ok`` and where it is, or why it is not there."""

    peer: str
    ok: bool
    detail: str


def default_quix_python(peers_cache: Path | None = None) -> Path:
    """The interpreter of the venv ``--install-peers`` makes for quixstreams."""
    return venv_python((peers_cache or default_peers_cache()) / "quix-venv")


def _venv_with(venv: Path, requirement: str, *pip_flags: str) -> Path:
    """``venv`` (made with this interpreter if missing) with ``requirement`` pip-installed."""
    python = venv_python(venv)
    steps: list[list[str]] = []
    if not python.exists():
        steps.append([sys.executable, "-m", "venv", str(venv)])
    steps.append([str(python), "-m", "pip", "install", "-q", *pip_flags, requirement])
    for command in steps:
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise PeerRunError(f"`{' '.join(command)}` took over {_PIP_TIMEOUT_S:.0f} s") from exc
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip()[-2000:]
            raise PeerRunError(f"`{' '.join(command)}` failed (exit {done.returncode}):\n{output}")
    return python


def _install_pc(peers_cache: Path) -> PeerInstall:
    install = PcInstall(peers_cache=peers_cache)
    label = f"parallel-consumer {install.version}"
    try:
        install_parallel_consumer(install)
    except (DevClusterError, PeerRunError) as exc:
        return PeerInstall(label, False, str(exc))
    return PeerInstall(label, True, f"jars in {install.jars}, harness in {install.classes}")


def _install_pyrallel(peers_cache: Path) -> PeerInstall:
    label = f"pyrallel-consumer {PYRALLEL_VERSION}"
    venv = peers_cache / "pyrallel-venv"
    if pyrallel_available(venv_python(venv)) == PYRALLEL_VERSION:
        return PeerInstall(label, True, f"already in {venv}")
    try:
        python = _venv_with(
            venv, f"pyrallel-consumer=={PYRALLEL_VERSION}", "--ignore-requires-python"
        )
    except PeerRunError as exc:
        return PeerInstall(label, False, str(exc))
    if pyrallel_available(python) is None:
        return PeerInstall(label, False, f"installed into {venv} but does not import")
    return PeerInstall(label, True, f"--pyrallel-python {python}")


def _install_quix(peers_cache: Path) -> PeerInstall:
    label = f"quixstreams {QUIX_VERSION}"
    venv = peers_cache / "quix-venv"
    if quix_available(str(venv_python(venv))) == QUIX_VERSION:
        return PeerInstall(label, True, f"already in {venv}")
    try:
        python = _venv_with(venv, f"quixstreams=={QUIX_VERSION}")
    except PeerRunError as exc:
        return PeerInstall(label, False, str(exc))
    if quix_available(str(python)) is None:
        return PeerInstall(label, False, f"installed into {venv} but does not import")
    return PeerInstall(label, True, f"--quix-python {python}")


def install_peers(
    peers_cache: Path | None = None, progress: Callable[[str], None] | None = None
) -> list[PeerInstall]:
    """Install every peer (see the module docstring); one :class:`PeerInstall` per peer."""
    cache = peers_cache or default_peers_cache()
    cache.mkdir(parents=True, exist_ok=True)
    outcomes: list[PeerInstall] = []
    for name, step in (
        ("Confluent Parallel Consumer (mvn, javac)", _install_pc),
        ("pyrallel-consumer (pip, own venv)", _install_pyrallel),
        ("quixstreams (pip, own venv)", _install_quix),
    ):
        if progress is not None:
            progress(f"installing {name} ...")
        outcomes.append(step(cache))
    return outcomes
