"""Confluent Parallel Consumer (PC) as a peer: the Java library keyshared is most often compared to.

PC's jars come from Maven Central through the same machinery as the broker's
(:mod:`keyshared.dev.jars`: ``mvn dependency:copy-dependencies`` on a pom shipped next to this
module, into a folder of the jar cache keyed by the pom's hash). The harness,
``KeysharedPcHarness.java``, ships as source and is compiled with ``javac`` into the peers cache,
into a folder keyed by the source's hash, the first time it is needed.

How PC is configured (see the harness): ``ProcessingOrder.KEY`` (per-key order, like keyshared),
``maxConcurrency`` = keyshared's worker count, commit mode ``PERIODIC_CONSUMER_ASYNCHRONOUS``
(PC's default: offsets committed asynchronously by PC's controller every 5 s, and at close),
and a KafkaConsumer with ``enable.auto.commit=false``, which PC requires.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

from keyshared.bench.peers.common import (
    INSTALL_HINT,
    PeerRunError,
    PeerTiming,
    default_peers_cache,
    run_timed,
)
from keyshared.dev.errors import DevClusterError
from keyshared.dev.jars import classpath, default_jar_cache, fetch_pom, is_fetched
from keyshared.dev.tools import find_java

__all__ = [
    "HARNESS_CLASS",
    "PcInstall",
    "harness_command",
    "install_parallel_consumer",
    "parallel_consumer_install",
    "parallel_consumer_version",
    "run_parallel_consumer",
    "skip_note",
]

HARNESS_CLASS = "KeysharedPcHarness"
_PACKAGE = "keyshared.bench.peers"
_POM = "parallel-consumer-pom.xml"
_SOURCE = f"{HARNESS_CLASS}.java"
_MAVEN_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
_JAVAC_HINT = (
    "`javac` was not found: the Parallel Consumer harness is compiled on first use; install a "
    "JDK 17+ (Debian/Ubuntu: `apt-get install openjdk-17-jdk-headless`)"
)


class PcInstall:
    """Where PC's jars and the compiled harness live (whether or not they exist yet)."""

    def __init__(self, jar_cache: Path | None = None, peers_cache: Path | None = None) -> None:
        pom = _pom_bytes()
        pom_digest = hashlib.sha256(pom).hexdigest()[:12]
        source_digest = hashlib.sha256(_source_bytes() + pom).hexdigest()[:12]
        self.version = parallel_consumer_version()
        self.jars = (jar_cache or default_jar_cache()) / (
            f"parallel-consumer-{self.version}-{pom_digest}"
        )
        self.classes = (peers_cache or default_peers_cache()) / f"pc-harness-{source_digest}"

    @property
    def jars_ready(self) -> bool:
        return is_fetched(self.jars)

    @property
    def harness_ready(self) -> bool:
        return (self.classes / f"{HARNESS_CLASS}.class").is_file()

    def classpath(self) -> str:
        return f"{self.classes}:{classpath(self.jars)}"


def _pom_bytes() -> bytes:
    return resources.files(_PACKAGE).joinpath(_POM).read_bytes()


def _source_bytes() -> bytes:
    return resources.files(_PACKAGE).joinpath(_SOURCE).read_bytes()


def parallel_consumer_version() -> str:
    """The PC version the shipped pom pins (one source of truth for results and docs)."""
    props = ET.fromstring(_pom_bytes()).find("m:properties", _MAVEN_NS)
    version = (
        props.findtext("m:parallel-consumer.version", namespaces=_MAVEN_NS)
        if props is not None
        else None
    )
    if not version:
        raise PeerRunError(f"{_POM} lacks the parallel-consumer.version property")
    return version


def parallel_consumer_install(install: PcInstall | None = None) -> PcInstall | None:
    """The install, with the harness compiled if needed, when PC's jars are cached and a JDK is
    here; None (the peer is skipped) otherwise."""
    install = install or PcInstall()
    if not install.jars_ready:
        return None
    try:
        find_java()
        _compile_harness(install)
    except (DevClusterError, PeerRunError):
        return None
    return install


def install_parallel_consumer(install: PcInstall | None = None) -> PcInstall:
    """Fetch PC's jars (Maven, once) and compile the harness (javac, once): for ``--install-peers``.

    :raises DevClusterError: ``mvn`` or ``java`` is missing, or Maven failed.
    :raises PeerRunError: ``javac`` is missing or the harness did not compile.
    """
    install = install or PcInstall()
    fetch_pom(_pom_bytes(), install.jars)
    find_java()
    _compile_harness(install)
    return install


def _compile_harness(install: PcInstall) -> None:
    """Compile the shipped source into ``install.classes`` (atomically, like the jar cache)."""
    if install.harness_ready:
        return
    javac = shutil.which("javac")
    if javac is None:
        raise PeerRunError(_JAVAC_HINT)
    install.classes.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(
        prefix=f".{install.classes.name}.", dir=install.classes.parent
    ) as work:
        source = Path(work) / _SOURCE
        source.write_bytes(_source_bytes())
        out = Path(work) / "classes"
        command = [javac, "-nowarn", "-cp", classpath(install.jars), "-d", str(out), str(source)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise PeerRunError(f"javac could not compile {_SOURCE}:\n{done.stderr[-3000:]}")
        try:
            out.rename(install.classes)
        except OSError:
            if not install.harness_ready:  # not a concurrent compile that finished first
                raise


def harness_command(
    java: str,
    install: PcInstall,
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    handler_s: float,
    concurrency: int,
    timeout: float,
    batch_size: int = 1,
    output: str | None = None,
    transactional: bool = False,
) -> list[str]:
    """The ``java`` command line of one timed PC run (see the harness for its arguments);
    ``batch_size`` > 1 runs PC's batch mode (``ParallelConsumerOptions.batchSize``);
    ``output`` makes it consume -> produce to that topic, in transactions with
    ``transactional`` (PC's ``PERIODIC_TRANSACTIONAL_PRODUCER``)."""
    if records < 1 or concurrency < 1 or handler_s < 0 or batch_size < 1:
        raise ValueError(
            f"parallel-consumer run needs records >= 1, concurrency >= 1, handler_s >= 0 and "
            f"batch_size >= 1, got records={records}, concurrency={concurrency}, "
            f"handler_s={handler_s}, batch_size={batch_size}"
        )
    batch = [str(batch_size)] if batch_size > 1 or output is not None else []
    if output is not None:
        batch += [output, "true" if transactional else "false"]
    return [
        java,
        "-Xss512k",  # up to a few hundred pool threads; the default 1 MB stacks add up
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-Dorg.slf4j.simpleLogger.logFile=System.err",
        "-cp",
        install.classpath(),
        HARNESS_CLASS,
        bootstrap,
        topic,
        group,
        str(records),
        str(round(handler_s * 1e9)),
        str(concurrency),
        str(max(1, round(timeout))),
        *batch,
    ]


def run_parallel_consumer(
    install: PcInstall,
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    handler_s: float,
    concurrency: int,
    timeout: float = 600.0,
    batch_size: int = 1,
    output: str | None = None,
    transactional: bool = False,
) -> PeerTiming:
    """Time PC over ``records`` records of ``topic`` from the beginning, with a fresh group
    (in batch mode when ``batch_size`` > 1)."""
    command = harness_command(
        find_java(),
        install,
        bootstrap,
        topic,
        group,
        records,
        handler_s,
        concurrency,
        timeout,
        batch_size,
        output,
        transactional,
    )
    return run_timed(f"parallel-consumer {install.version}", command, timeout + 60)


def skip_note() -> str:
    """What a result says when PC is not installed: exactly how to install it."""
    return (
        f"Confluent Parallel Consumer {parallel_consumer_version()} not installed (its jars "
        f"are not in {default_jar_cache()}, or no JDK 17 `java`/`javac`): skipped; run "
        f"`{INSTALL_HINT}` (needs mvn and a JDK 17)"
    )
