"""Locate the external programs the local cluster runs: `java` and `mvn`.

Both are looked up once, when first needed, so commands that need neither (`keyshared dev env`,
`pytest -m unit`) work on a machine without them, and a missing tool yields one message that
says what to install instead of a `FileNotFoundError` from deep inside `subprocess`.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from keyshared.dev.errors import MissingToolError

__all__ = ["MIN_JAVA_VERSION", "find_java", "find_mvn"]

# Kafka 4 brokers require Java 17 (KIP-1013).
MIN_JAVA_VERSION = 17

_JAVA_HINT = (
    "install a Java 17+ runtime (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`) "
    "or point JAVA_HOME at one"
)
_MVN_HINT = (
    "install Maven (Debian/Ubuntu: `apt-get install maven`); it is only needed once, to fetch "
    "the Kafka and ZooKeeper jars into the cache (`keyshared dev fetch`)"
)


@functools.cache
def find_java() -> str:
    """The `java` executable (JAVA_HOME first, then PATH), checked to be Java 17 or newer."""
    java_home = os.environ.get("JAVA_HOME")
    candidate: str | None = None
    if java_home:
        home_java = Path(java_home) / "bin" / "java"
        candidate = str(home_java) if os.access(home_java, os.X_OK) else None
    candidate = candidate or shutil.which("java")
    if candidate is None:
        raise MissingToolError(f"`java` was not found: {_JAVA_HINT}.")
    version = _java_major_version(candidate)
    if version < MIN_JAVA_VERSION:
        raise MissingToolError(
            f"{candidate} is Java {version}, Kafka 4 needs Java {MIN_JAVA_VERSION}+: {_JAVA_HINT}."
        )
    return candidate


@functools.cache
def find_mvn() -> str:
    """The `mvn` executable on PATH."""
    candidate = shutil.which("mvn")
    if candidate is None:
        raise MissingToolError(f"`mvn` was not found: {_MVN_HINT}.")
    return candidate


def _java_major_version(java: str) -> int:
    """Parse `java -version` (printed on stderr): `version "17.0.15"` -> 17, `"1.8.0"` -> 8."""
    try:
        result = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MissingToolError(f"{java} -version failed ({exc}): {_JAVA_HINT}.") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if match is None:
        raise MissingToolError(f"cannot read the version of {java}: {_JAVA_HINT}.")
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))
    return major
