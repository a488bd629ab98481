"""A SparkSession that can read Kafka: the connector jars, this interpreter, quiet logs.

Why the interpreter is pinned: Python workers unpickle the job's functions (the handler, the
task writer), which only works when they run the same Python with the same packages as the
driver; ``sys.executable`` is the one interpreter known to have keyshared installed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from keyshared.spark.jars import kafka_source_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_MASTER", "spark_session"]

DEFAULT_MASTER = "local[*]"


def spark_session(
    master: str = DEFAULT_MASTER,
    *,
    app_name: str = "keyshared",
    jars: str | None = None,
    shuffle_partitions: int | None = None,
    ui: bool = False,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get (or create) a SparkSession with Spark's Kafka source on its classpath.

    Example::

        spark = spark_session("local[4]")
        dlq = read_dlq(spark, "127.0.0.1:9092", "orders.dlq")

    :param master: any Spark master URL (``local[*]``, ``spark://host:7077``, ``yarn``...).
    :param jars: comma-separated jars or folders of the Kafka source (default: see
        :func:`keyshared.spark.jars.kafka_source_jars`).
    :param shuffle_partitions: ``spark.sql.shuffle.partitions``: how many tasks replay keys
        in parallel (default: Spark's, 200; small jobs run faster with fewer).
    :param ui: start the Spark web UI (off: it binds a port and costs start-up time).
    :param conf: further Spark properties; they win over everything set here.
    :raises MissingJarsError: the Kafka source jars are missing (see ``jars``).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", ",".join(kafka_source_jars(jars)))
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.ui.showConsoleProgress", "false")  # keyshared draws its own progress
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # all traffic on loopback
        builder = builder.config("spark.driver.host", "127.0.0.1")
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for name, value in (conf or {}).items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
