"""librdkafka client properties, as Spark's Kafka source (the Java client) understands them.

Why: one ``-X name=value`` list configures every client of a Spark job, the Python ones on
librdkafka (offset probes, the transactional producers) and Spark's Kafka source, which is
Kafka's Java client. Most names are shared, but not the credentials: librdkafka takes
``sasl.username`` and ``sasl.password``, the Java client a JAAS line in ``sasl.jaas.config``,
and a PEM CA file is ``ssl.ca.location`` in one and a PEM truststore in the other. Passed
through unchanged, the Java client ignores the librdkafka names and fails to authenticate, so
a secured cluster's reads failed while the rest of the job could connect.

Example::

    >>> options = java_kafka_options({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
    ...                               "sasl.username": "alice", "sasl.password": "s3cret"})
    >>> options["sasl.jaas.config"].split(" required ")[1]
    'username="alice" password="s3cret";'
    >>> sorted(options)
    ['sasl.jaas.config', 'sasl.mechanism', 'security.protocol']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from keyshared.errors import ConfigurationError

__all__ = ["java_kafka_options"]

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# librdkafka-only names that mean something the Java client spells differently; they are
# translated below, never passed through.
_TRANSLATED = frozenset(
    {"sasl.username", "sasl.password", "sasl.mechanisms", "sasl.mechanism", "ssl.ca.location"}
)
# Security settings keyshared cannot translate: silently dropping them would fail later as a
# vague authentication error inside Spark, so they are refused here, by name.
_UNTRANSLATABLE = ("ssl.certificate.", "ssl.key.location", "ssl.key.pem", "sasl.kerberos.",
                   "sasl.oauthbearer.", "ssl.ca.pem", "ssl.keystore.")  # fmt: skip
# Not Kafka client properties at all: callbacks and librdkafka-only switches.
_LIBRDKAFKA_ONLY = ("error_cb", "oauth_cb", "throttle_cb", "logger", "stats_cb", "log_level",
                    "debug", "enable.ssl.certificate.verification")  # fmt: skip


def java_kafka_options(client: Mapping[str, Any]) -> dict[str, str]:
    """The Java client's properties (without the ``kafka.`` prefix) for a librdkafka config.

    ``sasl.username``/``sasl.password`` become ``sasl.jaas.config`` for PLAIN and SCRAM (an
    explicit ``sasl.jaas.config`` wins); ``ssl.ca.location`` becomes a PEM truststore;
    ``ssl.endpoint.identification.algorithm=none`` becomes the Java client's empty value.
    Everything else passes through unchanged.

    :raises ConfigurationError: a security property that cannot be translated (client
        certificates, Kerberos, OAUTHBEARER), or SASL credentials for another mechanism.
    """
    options: dict[str, str] = {}
    for name, value in client.items():
        if name in _TRANSLATED or name.startswith(_LIBRDKAFKA_ONLY) or callable(value):
            continue
        if name.startswith(_UNTRANSLATABLE):
            raise ConfigurationError(
                name,
                "cannot be translated for Spark's Kafka source (the Java client); use SASL "
                "PLAIN/SCRAM or a CA file (ssl.ca.location) with Spark jobs",
            )
        options[name] = str(value)
    mechanism = str(client.get("sasl.mechanism", client.get("sasl.mechanisms", ""))).upper()
    if mechanism:
        options["sasl.mechanism"] = mechanism
    if "sasl.username" in client and "sasl.jaas.config" not in client:
        module = _LOGIN_MODULES.get(mechanism or "PLAIN")
        if module is None:
            raise ConfigurationError(
                "sasl.mechanism",
                f"{mechanism} credentials cannot be translated for Spark's Kafka source; "
                "give sasl.jaas.config",
            )
        user, password = (
            _jaas_quote(client["sasl.username"]),
            _jaas_quote(client.get("sasl.password", "")),
        )
        options["sasl.jaas.config"] = f'{module} required username="{user}" password="{password}";'
    if "ssl.ca.location" in client:
        options["ssl.truststore.type"] = "PEM"
        options["ssl.truststore.location"] = str(client["ssl.ca.location"])
    if str(options.get("ssl.endpoint.identification.algorithm", "")).lower() == "none":
        options["ssl.endpoint.identification.algorithm"] = ""
    return options


def _jaas_quote(value: object) -> str:
    """A JAAS quoted-string body: backslashes and double quotes escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"')
