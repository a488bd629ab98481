"""The pinned Kafka and ZooKeeper jars: fetched once from Maven Central, cached outside the repo.

`pom.xml` (next to this module) pins every version. `fetch_jars` runs
`mvn dependency:copy-dependencies` on it into a folder named after the Kafka version and a hash
of the pom, so a second call finds the complete folder and touches neither Maven nor the
network, and an edited pom never mixes with jars of the old one. The folder appears atomically
(copied into a temporary sibling, then renamed), so an interrupted fetch leaves no half-filled
cache behind and two concurrent fetches cannot corrupt each other.

`spark-pom.xml` does the same for Spark's Kafka source (`fetch_spark_jars`), at the version of
the installed PySpark, which the caller passes in (this module never imports pyspark).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from keyshared.dev.errors import JarFetchError
from keyshared.dev.runtime import user_cache_dir
from keyshared.dev.tools import find_mvn

__all__ = [
    "JAR_CACHE_ENV",
    "PinnedVersions",
    "classpath",
    "default_jar_cache",
    "fetch_jars",
    "fetch_pom",
    "fetch_spark_jars",
    "is_fetched",
    "jars_dir_for_pom",
    "pinned_versions",
    "pom_bytes",
    "spark_jars_dir",
    "spark_pom_bytes",
]

JAR_CACHE_ENV = "KEYSHARED_JAR_CACHE"
_COMPLETE_MARKER = ".complete"
_MAVEN_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
# A cold fetch downloads ~40 MB; a slow mirror should still finish, a hung one should not hang CI.
_FETCH_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class PinnedVersions:
    """The server versions the pom pins (shown by `keyshared dev status`)."""

    kafka: str
    zookeeper: str


def pom_bytes() -> bytes:
    """The packaged pom.xml (installed as package data next to this module)."""
    return resources.files("keyshared.dev").joinpath("pom.xml").read_bytes()


def pinned_versions() -> PinnedVersions:
    """Read `kafka.version` and `zookeeper.version` from the pom: one source of truth."""
    root = ET.fromstring(pom_bytes())
    props = root.find("m:properties", _MAVEN_NS)
    kafka = props.findtext("m:kafka.version", namespaces=_MAVEN_NS) if props is not None else None
    zookeeper = (
        props.findtext("m:zookeeper.version", namespaces=_MAVEN_NS) if props is not None else None
    )
    if not kafka or not zookeeper:
        raise JarFetchError("pom.xml lacks the kafka.version / zookeeper.version properties")
    return PinnedVersions(kafka=kafka, zookeeper=zookeeper)


def default_jar_cache() -> Path:
    """`$KEYSHARED_JAR_CACHE`, else `$XDG_CACHE_HOME/keyshared/jars`, else `~/.cache/...`.

    Kept apart from the runtime folder so that every runtime folder (each test session makes
    its own) shares one download.
    """
    return user_cache_dir(JAR_CACHE_ENV, "jars")


def jars_dir_for_pom(cache_root: Path | None = None) -> Path:
    """Where the jars of the packaged pom live (whether or not they are fetched yet)."""
    root = cache_root if cache_root is not None else default_jar_cache()
    digest = hashlib.sha256(pom_bytes()).hexdigest()[:12]
    return root / f"kafka-{pinned_versions().kafka}-{digest}"


def fetch_jars(cache_root: Path | None = None) -> Path:
    """Return the folder of jars for the pinned versions, fetching them with Maven if needed.

    :param cache_root: parent of the per-pom folders; default `default_jar_cache()`.
    :raises MissingToolError: the jars are not cached and `mvn` is not installed.
    :raises JarFetchError: Maven failed (its output is in the message).
    """
    return _fetch(pom_bytes(), jars_dir_for_pom(cache_root), {})


def spark_pom_bytes() -> bytes:
    """The packaged spark-pom.xml: Spark's Kafka source for the installed PySpark."""
    return resources.files("keyshared.dev").joinpath("spark-pom.xml").read_bytes()


def spark_jars_dir(spark_version: str, scala_version: str, cache_root: Path | None = None) -> Path:
    """Where the Kafka-source jars of Spark ``spark_version`` live (fetched or not)."""
    root = cache_root if cache_root is not None else default_jar_cache()
    digest = hashlib.sha256(spark_pom_bytes()).hexdigest()[:12]
    return root / f"spark-kafka-{spark_version}-{scala_version}-{digest}"


def fetch_spark_jars(
    spark_version: str, scala_version: str, cache_root: Path | None = None
) -> Path:
    """The folder of ``spark-sql-kafka-0-10`` jars for this Spark and Scala version, fetched
    from Maven Central on first use (same cache and guarantees as :func:`fetch_jars`).

    :raises MissingToolError: the jars are not cached and `mvn` is not installed.
    :raises JarFetchError: Maven failed, e.g. the connector of this version is not published.
    """
    return _fetch(
        spark_pom_bytes(),
        spark_jars_dir(spark_version, scala_version, cache_root),
        {"spark.version": spark_version, "scala.binary.version": scala_version},
    )


def is_fetched(target: Path) -> bool:
    """Whether a fetch into ``target`` completed (the folder is only renamed into place then)."""
    return (target / _COMPLETE_MARKER).is_file()


def fetch_pom(pom: bytes, target: Path, properties: dict[str, str] | None = None) -> Path:
    """The runtime jars of any ``pom`` (e.g. a bench peer's), copied into ``target`` once."""
    return _fetch(pom, target, properties or {})


def _fetch(pom: bytes, target: Path, properties: dict[str, str]) -> Path:
    """Copy the runtime dependencies of ``pom`` into ``target`` (atomically), unless there."""
    if (target / _COMPLETE_MARKER).is_file():
        return target
    mvn = find_mvn()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as work:
        work_dir = Path(work)
        pom_file = work_dir / "pom.xml"
        pom_file.write_bytes(pom)
        out_dir = work_dir / "jars"
        command = [
            mvn, "-q", "-B", "-f", str(pom_file), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={out_dir}",
            *(f"-D{name}={value}" for name, value in sorted(properties.items())),
        ]  # fmt: skip
        try:
            result = subprocess.run(
                command,
                cwd=work_dir,
                capture_output=True,
                text=True,
                timeout=_FETCH_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise JarFetchError(
                f"mvn did not finish within {_FETCH_TIMEOUT_S:.0f} s; is Maven Central reachable?"
            ) from exc
        jars = sorted(p.name for p in out_dir.glob("*.jar")) if out_dir.is_dir() else []
        if result.returncode != 0 or not jars:
            output = (result.stdout + result.stderr).strip()[-3000:]
            raise JarFetchError(
                f"`{' '.join(command[1:5])} ...` failed (exit {result.returncode}); it needs "
                f"Maven Central (or a mirror in ~/.m2/settings.xml).\n{output}"
            )
        (out_dir / _COMPLETE_MARKER).write_text("\n".join(jars) + "\n")
        try:
            out_dir.rename(target)
        except OSError:
            # Another fetch finished first; its folder is as good as ours.
            if not (target / _COMPLETE_MARKER).is_file():
                shutil.rmtree(target, ignore_errors=True)
                out_dir.rename(target)
    return target


def classpath(jars_dir: Path) -> str:
    """A `java -cp` value for every jar of the folder (the JVM expands the `*`)."""
    return str(jars_dir / "*")
