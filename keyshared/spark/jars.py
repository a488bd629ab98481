"""Spark's Kafka source on the classpath: the user's own jars, or the cached Maven ones.

Why not ``spark.jars.packages``: that makes Spark resolve through Ivy at session start, from
wherever the driver happens to be, every time. keyshared resolves once with ``mvn`` into the
same cache as the broker's jars (``keyshared/dev/spark-pom.xml``) and hands Spark local files,
so a session starts offline once the cache is warm. The connector must match the running Spark
exactly (it uses Spark internals), so the version comes from the installed PySpark.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from keyshared.dev.errors import JarFetchError, MissingToolError
from keyshared.dev.jars import fetch_spark_jars
from keyshared.spark.errors import MissingJarsError

__all__ = ["SPARK_JARS_ENV", "SPARK_KAFKA_VERSION_ENV", "installed_spark", "kafka_source_jars"]

SPARK_JARS_ENV = "KEYSHARED_SPARK_JARS"  # comma-separated jar files or folders of jars
SPARK_KAFKA_VERSION_ENV = "KEYSHARED_SPARK_KAFKA_VERSION"  # fetch this connector version instead


def installed_spark() -> tuple[str, str]:
    """``(spark_version, scala_binary_version)`` of the installed PySpark.

    The Scala version is read from the name of PySpark's own ``spark-core_<scala>-*.jar``.
    """
    import pyspark

    version = str(pyspark.__version__)
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("spark-core_*.jar"):
        found = re.match(r"spark-core_(\d+\.\d+)-", jar.name)
        if found:
            return version, found.group(1)
    return version, "2.13"  # Spark 4 is built for Scala 2.13 only


def kafka_source_jars(jars: str | None = None) -> list[str]:
    """Local jar files that give Spark its ``kafka`` source.

    :param jars: comma-separated jar files or folders (default ``$KEYSHARED_SPARK_JARS``);
        when neither is set, the jars of the installed Spark version are fetched once with
        ``mvn`` into keyshared's jar cache (``$KEYSHARED_SPARK_KAFKA_VERSION`` overrides the
        connector version, for a Spark whose own is not published).
    :raises MissingJarsError: a given path holds no jar, or the fetch failed (with the reason).
    """
    given = jars if jars is not None else os.environ.get(SPARK_JARS_ENV)
    if given:
        return _expand(given)
    spark_version, scala = installed_spark()
    version = os.environ.get(SPARK_KAFKA_VERSION_ENV) or spark_version
    try:
        folder = fetch_spark_jars(version, scala)
    except (JarFetchError, MissingToolError) as exc:
        raise MissingJarsError(
            f"cannot get Spark's Kafka source (spark-sql-kafka-0-10_{scala}:{version}) for "
            f"PySpark {spark_version}: {exc}\nGive the jars with --spark-jars or "
            f"${SPARK_JARS_ENV} (comma-separated files or folders), or set "
            f"${SPARK_KAFKA_VERSION_ENV} to a published connector version."
        ) from exc
    return sorted(str(path) for path in folder.glob("*.jar"))


def _expand(given: str) -> list[str]:
    found: list[str] = []
    for part in (p.strip() for p in given.split(",")):
        if not part:
            continue
        path = Path(part).expanduser()
        if path.is_dir():
            found += sorted(str(jar) for jar in path.glob("*.jar"))
        elif path.is_file() and path.suffix == ".jar":
            found.append(str(path))
        else:
            raise MissingJarsError(
                f"{part!r} (from --spark-jars / ${SPARK_JARS_ENV}) is not a jar file or a "
                "folder of jars"
            )
    if not any("spark-sql-kafka" in Path(jar).name for jar in found):
        raise MissingJarsError(
            f"no spark-sql-kafka-0-10 jar in {given!r} (--spark-jars / ${SPARK_JARS_ENV}); "
            "Spark's Kafka source needs it, with kafka-clients and commons-pool2"
        )
    return found
