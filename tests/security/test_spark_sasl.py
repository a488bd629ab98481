"""The job's ``-X`` client properties reach Spark's Kafka source in its own dialect (issue 14).

Spark's Kafka source is Kafka's Java client: it ignores librdkafka's ``sasl.username`` and
``sasl.password`` and wants a JAAS line. Before the translation, a Spark job on a SASL cluster
resolved its offsets (librdkafka, with the credentials) and then failed to read (Java, without
them). The unit tests pin the translation; the last test reads a SASL broker through Spark.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

import keyshared
from keyshared.spark.kafka_options import java_kafka_options
from tests.security.conftest import SaslBroker

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_sasl_credentials_become_a_jaas_line() -> None:
    options = java_kafka_options({
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": 'al"ice', "sasl.password": "p\\w", "client.id": "replay",
    })  # fmt: skip
    assert options == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'{SCRAM} required username="al\\"ice" password="p\\\\w";',
        "client.id": "replay",
    }
    plain = java_kafka_options({"sasl.username": "u", "sasl.password": "p"})
    assert plain["sasl.jaas.config"] == f'{PLAIN} required username="u" password="p";'


def test_ca_file_and_explicit_jaas_and_librdkafka_only_names() -> None:
    options = java_kafka_options({
        "ssl.ca.location": "/etc/ca.pem", "ssl.endpoint.identification.algorithm": "none",
        "sasl.jaas.config": "given", "sasl.username": "u", "debug": "all", "log_level": 7,
    })  # fmt: skip
    assert options == {
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "",
        "sasl.jaas.config": "given",
    }


@pytest.mark.parametrize(
    ("config", "option"),
    [
        ({"ssl.certificate.location": "/c.pem"}, "ssl.certificate.location"),
        ({"sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name"),
        ({"sasl.mechanism": "GSSAPI", "sasl.username": "u"}, "sasl.mechanism"),
    ],
)
def test_untranslatable_security_settings_are_refused_by_name(
    config: dict[str, str], option: str
) -> None:
    with pytest.raises(keyshared.ConfigurationError) as caught:
        java_kafka_options(config)
    assert caught.value.option == option


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from keyshared.spark import spark_session

    repo = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)
    session = spark_session("local[1]", app_name="keyshared-sasl", shuffle_partitions=1,
                            conf={"spark.driver.memory": "512m"})  # fmt: skip
    yield session
    session.stop()


def test_spark_reads_a_sasl_topic_with_the_jobs_client_properties(
    spark: Any, sasl_broker: SaslBroker
) -> None:
    from keyshared.spark import read_topic

    topic = sasl_broker.new_topic(partitions=2)
    producer = Producer(sasl_broker.config)
    for i in range(20):
        producer.produce(topic, key=f"k{i % 4}".encode(), value=str(i).encode())
    assert producer.flush(30) == 0
    client = dict(sasl_broker.credentials)  # what `-X` gives: librdkafka names
    frame = read_topic(spark, sasl_broker.bootstrap, topic, client_config=client,
                       kafka_options=client, timeout=20)  # fmt: skip
    values = sorted(int(row["value"]) for row in frame.select("value").collect())
    assert values == list(range(20))
